"""Knowledge of Hugging Face libraries' Python classes (``transformers``, ``diffusers``), applied
only to classes of those libraries already imported by the program: nothing here imports them."""
