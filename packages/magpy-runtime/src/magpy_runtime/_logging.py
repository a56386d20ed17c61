"""The ``magpy`` logger and the ``MAGPY_LOGS`` topics."""

from __future__ import annotations

import logging

from ._config import config

__all__ = ["log", "log_topic"]

log = logging.getLogger("magpy")

if config.logs:
    _handler = logging.StreamHandler()
    _handler.setFormatter(logging.Formatter("[magpy] %(message)s"))
    log.addHandler(_handler)
    log.setLevel(logging.INFO)  # the chosen topics log at INFO; everything else stays at DEBUG


def log_topic(topic: str, msg: str, *args: object) -> None:
    """Log ``msg`` when ``topic`` is enabled in ``MAGPY_LOGS`` (or at DEBUG level otherwise)."""
    if topic in config.logs or "all" in config.logs:
        log.info(msg, *args)
    elif log.isEnabledFor(logging.DEBUG):
        log.debug(msg, *args)
