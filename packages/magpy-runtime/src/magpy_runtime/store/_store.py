"""Persistent records: whole-call records kept in a directory, served after a restart.

With ``config.records_dir`` set (``MAGPY_RECORDS_DIR``; off by default: loading generated code
from disk is a decision to trust that directory), each whole-call record a compiled callable
makes is also written there, as one entry file keyed by the code it came from (the class and
its ``forward``, or the function: their module, qualified name and a digest of their code, not
their file's path, so another checkout of the program finds them), the backend
(a name, or Inductor's mode and options; a callable backend is never stored) and
``fullgraph``/``dynamic``. A process whose call no record of its own (nor a sibling's, see
``_pool``) serves reads the entries of that key once, and tries their guards before it
monitors anything: one that passes is rebuilt with ``build_record`` (the backend's compile
finds Inductor's caches warm) and serves the call.

Libraries (``config.records_native``, on by default): a stored record of the ``"inductor"``
backend whose graph a shared library can run exactly (``magpy_codegen.native_problem``: CPU
tensors in and out, no updates in place, no random draws, no autograd) also gets its graph
compiled ahead of time (AOTInductor) on MagPy's worker thread after the entry is written; the
entry is then written again with the library after its content. A process that loads such an
entry runs the library (torch's C++ runner, ~1 ms to load) instead of compiling the graph:
Inductor is not even imported. ``magpy.wait_compiles()`` waits for the libraries being built.

Without a records directory each such record is kept in memory as the same entry (``_kept``),
for ``magpy.save_cache_artifacts``. Loaded bundles' entries (``_bundled``) are served like the
directory's, to callables compiled before or after the bundle was loaded.

Not stored (``unstored`` says which and why): records of callables not found again by name or
with a callable backend, of graphs with symbolic sizes, of split programs (sites and
segments), and records holding what cannot be found again by name (``_persist``).

Trust and integrity: the directory is created user-only (0700) and refused when it is
another user's or writable by group or others; an entry is written to a temporary file
(0600) and renamed into place. Its header holds the versions (MagPy with a digest of its
sources, torch, Python), the key, the objects it refers to by name with their fingerprints,
and a SHA-256 over header, content and library. Before anything is unpickled, the file's owner and
permissions, the digest, the versions and the key are checked, and every referenced object
is found and fingerprinted again; an entry failing any check is ignored with one warning
(once per reason) and never raises. An entry whose referenced code changed is deleted.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
import weakref
from pathlib import Path
from typing import Any, TypeGuard

import attrs
import torch
import torch.fx as fx

from magpy_codegen import PythonGuard, Record, build_record, record_guard
from magpy_monitor import FAKE, UPDATE_RULES, ambient_state

from .._config import background_compile, config
from .._logging import log_topic
from .._owner import RecordOwner
from ._bundled import (
    add_bundled,
    bundled,
    bundled_generation,
    clear_bundled,
    give_torch_its_artifacts,
)
from ._entryfiles import (
    MAGIC,
    MAX_ENTRIES_PER_KEY,
    SUFFIX,
    canonical,
    clear_entries,
    digest,
    directory_problem,
    entry_files,
    parse_entry,
    read_entry,
    versions,
    warn_once,
    write_entry,
)
from ._kept import (
    NO_NAME,
    Kept,
    build_libraries,
    clear_not_stored,
    failed,
    keep,
    not_stored,
    not_stored_lines,
)
from ._keys import code_key
from ._libraries import Prebuilt, build_library, library_examples, loaded_library, split_library
from ._persist import Unstorable, decode, decode_graph, encode, encode_graph, resolve_refs

__all__ = [
    "add_bundled",
    "attach",
    "build_kept_libraries",
    "clear_stored",
    "commit",
    "from_disk",
    "serve",
    "snapshot",
    "unstored",
    "used_entries",
]


@attrs.define(eq=False)
class _Slot:
    """A compiled callable's place in the store: its directory and key, and what it took."""

    directory: str | None  # (None: no records_dir: its records are kept in memory)
    key: dict[str, Any]
    key_hash: str
    from_disk: int = 0  # records it took from the store
    used: set[str] = attrs.field(factory=set)  # entries it took (by file name)
    kept: dict[str, Kept] = attrs.field(factory=dict)  # its records, kept in memory


_slots: weakref.WeakKeyDictionary[RecordOwner, _Slot] = weakref.WeakKeyDictionary()


def attach(state: RecordOwner, model: Any) -> None:
    """Give ``state``, the cache of ``model`` compiled, its key in the store (when its code
    and backend can be stored): its records are written to ``config.records_dir``, or kept in
    memory without one (for ``magpy.save_cache_artifacts``), and it is served the entries of
    the directory and of the bundles loaded, before or after it was compiled."""
    directory = config.records_dir
    key = code_key(model)
    settings = state.settings.stored_key()  # (the backend, fullgraph, dynamic)
    if key is None or settings is None:
        why = "a backend that is a callable" if key is not None else NO_NAME
        not_stored(state.qualname, why)
        return
    key |= settings
    key_hash = hashlib.sha256(canonical(key)).hexdigest()[:24]
    where = os.path.abspath(os.path.expanduser(directory)) if directory else None
    _slots[state] = _Slot(where, key, key_hash)


def unstored() -> list[str]:
    """What this process compiled that no bundle can hold, and why (``magpy.
    save_cache_artifacts`` says it): one line per callable and reason."""
    return not_stored_lines(list(_slots))


def from_disk(state: RecordOwner) -> int:
    """Records of ``state`` taken from the store (``magpy.stats``)."""
    slot = _slots.get(state)
    return slot.from_disk if slot is not None else 0


# ----------------------------------------------------------------------------- storing
@attrs.frozen
class Pending:
    """A record's ingredients, taken before its graph is compiled (a backend may rewrite
    the graph it compiles), written once the record is in the cache (``commit``)."""

    slot: _Slot
    content: dict[str, Any]
    inputs: list[Any]
    examples: list[Any] | None  # the recording call's graph inputs, for a native library


def snapshot(state: RecordOwner, result: Any) -> Pending | None:
    """What ``state``'s new record from ``result`` would store (None: nothing: no key, or
    a graph with symbolic sizes, or example inputs that are not plain tensors)."""
    slot = _slots.get(state)
    if slot is None:
        return None
    try:
        graph = result.graph
        if _symbolic(graph):
            raise Unstorable("its graph has symbolic sizes")
        capture = result.capture
        content = {
            "plan": result.plan,
            "graph": encode_graph(graph),
            "grad_enabled": capture.grad_enabled,
            "ambient": capture.ambient,
            "restore_rng": bool(capture.draws_random),
            "restore_inputs": tuple(capture.mutated_inputs),
            "undo": {rule: tuple(capture.undo_inputs(rule)) for rule in UPDATE_RULES},
        }
        inputs = [_input_meta(x) for x in result.example_inputs]
        examples = library_examples(state, result)
    except Unstorable as exc:
        not_stored(state.qualname, str(exc))
        return None
    except Exception as exc:  # a failure of ours: the record serves this process anyway
        failed(state.qualname, exc, on_disk=slot.directory is not None)
        return None
    return Pending(slot, content, inputs, examples)


_SYMBOLS = (torch.SymInt, torch.SymFloat, torch.SymBool)


def _symbolic(graph: fx.Graph) -> bool:
    for node in graph.nodes:
        fake = node.meta.get(FAKE)
        if isinstance(fake, _SYMBOLS):
            return True
        if isinstance(fake, torch.Tensor) and any(isinstance(s, _SYMBOLS) for s in fake.shape):
            return True
    return False


def _input_meta(value: Any) -> Any:
    """A graph input as the header shows it (the inputs of the call a loaded record serves
    are what its backend compiles for: they passed the same tensor checks)."""
    if type(value) in (bool, int, float):
        return value
    if type(value) not in (torch.Tensor, torch.nn.Parameter) or value.layout != torch.strided:
        raise Unstorable(f"a graph input of type {type(value).__qualname__}")
    return [list(value.shape), list(value.stride()), str(value.dtype), str(value.device)]


def commit(state: RecordOwner, pending: Pending | None, epoch: int) -> None:
    """Write ``pending`` as an entry (nothing when ``magpy.reset`` ran meanwhile, or when
    the record holds something that cannot be stored; never raises)."""
    if pending is None or epoch != state.epoch:
        return
    try:
        _commit(state, pending)
    except Exception as exc:  # a failure of ours: the record serves this process anyway
        failed(state.qualname, exc, on_disk=pending.slot.directory is not None)


def _commit(state: RecordOwner, pending: Pending) -> None:
    slot = pending.slot
    if slot.directory is None:  # (kept in memory; pickled only when a bundle is saved)
        rows = pending.content["graph"] if pending.examples is not None else None
        name = keep(slot.kept, slot.key_hash, _header(state, pending, ()), pending.content, rows)
        if name is not None:
            slot.used.add(name)
        return
    try:
        encoded = encode(pending.content)
    except Unstorable as exc:
        not_stored(state.qualname, str(exc))
        return
    problem = directory_problem(slot.directory, create=True)
    if problem is not None:
        warn_once(problem, slot.directory)
        return
    if len(entry_files(slot.directory, slot.key_hash + "-")) >= MAX_ENTRIES_PER_KEY:
        not_stored(state.qualname, f"{MAX_ENTRIES_PER_KEY} entries of its key already")
        return
    header = _header(state, pending, encoded.refs) | {"versions": versions()}
    name = _write(slot, header, encoded.payload)
    if name is None:
        return
    log_topic("records", "record of %s stored as %s", state.qualname, name)
    if pending.examples is not None:
        entry = (header, encoded.payload)
        build_library(
            state.qualname,
            pending.content["graph"],
            pending.examples,
            lambda library: _add_library(state, slot, name, entry, library),
        )


def _header(state: RecordOwner, pending: Pending, refs: Any) -> dict[str, Any]:
    return {
        "format": 1,
        "key": pending.slot.key,
        "qualname": state.qualname,
        "refs": [list(r) for r in refs],
        "inputs": pending.inputs,
        "created": time.time(),
    }


def build_kept_libraries() -> None:
    """Build the libraries of the records kept in memory that get one (then
    ``wait_compiles``)."""
    build_libraries([kept for slot in list(_slots.values()) for kept in slot.kept.values()])


def _write(slot: _Slot, header: dict[str, Any], payload: bytes) -> str | None:
    """Write an entry of ``header`` (signed here) and ``payload``; its file name (None: it
    could not be written, said once)."""
    assert slot.directory is not None
    header["sha256"] = digest(header, payload)
    name = f"{slot.key_hash}-{header['sha256'][:16]}{SUFFIX}"
    try:
        write_entry(Path(slot.directory), name, MAGIC + canonical(header) + b"\n" + payload)
    except OSError as exc:
        warn_once(f"cannot write an entry: {exc.strerror}", slot.directory)
        return None
    slot.used.add(name)  # (this process has the record already)
    return name


def _add_library(
    state: RecordOwner,
    slot: _Slot,
    old: str,
    entry: tuple[dict[str, Any], bytes],
    library: tuple[bytes, dict[str, Any]],
) -> None:
    data, made_for = library
    header = {k: v for k, v in entry[0].items() if k != "sha256"}
    header["native"] = {"bytes": len(data), "runner": "cpu", "platform": made_for}
    assert slot.directory is not None
    if not (Path(slot.directory) / old).exists():
        return  # (cleared meanwhile)
    name = _write(slot, header, entry[1] + data)
    if name is None:
        return
    (Path(slot.directory) / old).unlink(missing_ok=True)
    slot.used.discard(old)
    log_topic("records", "record of %s stored with its library as %s", state.qualname, name)


# ----------------------------------------------------------------------------- loading
@attrs.define(eq=False)
class _Entry:
    """An entry read, checked and unpickled; ``guard``, its record's guard alone (made on
    first use for the callable ``guard_for``: it does not depend on the backend), handed to the
    record built from it; ``built``, that record, forked for other callables (eager backend)."""

    name: str
    header: dict[str, Any]
    content: dict[str, Any]
    native: bytes | None = None  # the compiled graph as a library (AOTInductor)
    guard: PythonGuard | None = None
    guard_for: str = ""  # (the qualname in its messages)
    built: Record | None = None
    broken: bool = False


_loaded: dict[tuple[str | None, str], tuple[int, list[_Entry]]] = {}  # (with the generation)
_load_lock = threading.Lock()
_CONTENT = frozenset(
    {"plan", "graph", "grad_enabled", "ambient", "restore_rng", "restore_inputs", "undo"}
)


def serve(
    state: RecordOwner, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Record | None:
    """The record of the first stored entry of ``state``'s key whose guard passes for this
    call, taken (each entry once; the entries are read once per process), or None."""
    slot = _slots.get(state)
    if slot is None:
        return None
    try:
        return _serve(slot, state, fn, args, kwargs)
    except Exception as exc:  # a failure of ours: the call is monitored, as without a store
        warn_once(
            f"a stored record cannot be used: {type(exc).__name__}: {exc}",
            slot.directory or "bundle",
        )
        return None


def _serve(
    slot: _Slot, state: RecordOwner, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Record | None:
    for entry in _entries(slot):
        if entry.broken or entry.name in slot.used:
            continue
        inputs = _probe(entry, state, fn, args, kwargs)
        if inputs is None:
            continue
        rec = _record(entry, state, inputs)
        if rec is None:
            continue
        slot.used.add(entry.name)
        slot.from_disk += 1
        state.note_uncompiled(rec)
        log_topic("records", "record of %s loaded from %s", state.qualname, entry.name)
        return rec
    return None


def _entries(slot: _Slot) -> list[_Entry]:
    at = (slot.directory, slot.key_hash)
    with _load_lock:
        found, generation = _loaded.get(at), bundled_generation(slot.key_hash)
        if found is None or found[0] != generation:  # (read again, with a bundle's entries)
            found = _loaded[at] = (generation, _load(slot))
    return found[1]


def _load(slot: _Slot) -> list[_Entry]:
    entries = _load_files(slot) if slot.directory is not None else []
    have = {e.name for e in entries}
    for name, data in bundled(slot.key_hash):
        if name not in have:  # (the same entry in the directory and a bundle: read once)
            entry = _check_entry(name, parse_entry(data), slot, None)
            if isinstance(entry, str):
                warn_once(entry, f"bundled entry {name}")
            else:
                entries.append(entry)
    return entries


def _load_files(slot: _Slot) -> list[_Entry]:
    assert slot.directory is not None
    files = entry_files(slot.directory, slot.key_hash + "-")
    if not files:
        return []
    problem = directory_problem(slot.directory, create=False)
    if problem is not None:
        warn_once(problem, slot.directory)
        return []
    entries = []
    for path in files:
        entry = _check_entry(path.name, read_entry(path), slot, path)
        if isinstance(entry, str):
            warn_once(entry, str(path))
        else:
            entries.append(entry)
    return entries


def _check_entry(
    name: str, read: tuple[dict[str, Any], bytes] | str, slot: _Slot, path: Path | None
) -> _Entry | str:
    """The entry ``read`` (``read_entry``'s or ``parse_entry``'s answer: the file and its
    digest checked), or why it is refused (then checked in this order: versions and key, the
    objects it refers to; only then is it unpickled). ``path``: its file, deleted when the
    code it was made from changed (None: a bundle's entry)."""
    if isinstance(read, str):
        return read
    header, payload = read
    made = header.get("versions")
    if made != versions():
        return f"made with other versions ({made}; this process: {versions()})"
    refs = header.get("refs")
    if header.get("key") != slot.key or header.get("format") != 1 or not _valid_refs(refs):
        return "the header does not match the entry's name"
    split = split_library(header, payload)
    if split is None:
        return "the header does not match the entry's content"
    payload, native = split
    resolved = resolve_refs((m, q, f) for m, q, f in refs)
    if isinstance(resolved, tuple):
        reason, stale = resolved
        if stale and path is not None:
            path.unlink(missing_ok=True)  # (the code it was made from is gone)
        return reason
    try:
        content = decode(payload, resolved)
    except Exception as exc:  # (a damaged content that passed the digest: not usable)
        return f"the content cannot be read: {type(exc).__name__}: {exc}"
    if not isinstance(content, dict) or set(content) != _CONTENT:
        return "the content is not a record's"
    return _Entry(name, header, content, native)


def _valid_refs(refs: Any) -> TypeGuard[list[list[Any]]]:
    return isinstance(refs, list) and all(
        isinstance(r, list)
        and len(r) == 3
        and isinstance(r[0], str)
        and isinstance(r[1], str)
        and (r[2] is None or isinstance(r[2], str))
        for r in refs
    )


def _build(
    entry: _Entry, state: RecordOwner, backend: Any, inputs: list[Any], guard: PythonGuard | None
) -> Record:
    c, native = entry.content, isinstance(backend, Prebuilt)
    return build_record(
        c["plan"],
        decode_graph(c["graph"]),
        inputs,
        backend,
        qualname=state.qualname,
        grad_enabled=c["grad_enabled"],
        ambient=(ambient_state, c["ambient"]),
        restore_rng=c["restore_rng"],
        restore_inputs=c["restore_inputs"],
        undo_inputs=c["undo"].__getitem__,
        background=not native
        and backend != "eager"
        and background_compile(state.background_compile),
        on_compiled=state.note_uncompiled,
        guard=guard,  # (tried on this call already: not generated and loaded again)
    )


def _probe(
    entry: _Entry, state: RecordOwner, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, ...] | None:
    """The graph inputs ``entry``'s guard returns for this call (None: it does not pass)."""
    if entry.guard is None or entry.guard_for != state.qualname:
        c = entry.content
        try:
            entry.guard = record_guard(
                c["plan"],
                qualname=state.qualname,
                grad_enabled=c["grad_enabled"],
                ambient=(ambient_state, c["ambient"]),
            )
        except Exception as exc:  # (MagPyError included: the entry is not usable)
            entry.broken = True
            warn_once(f"its guard cannot be rebuilt: {type(exc).__name__}: {exc}", entry.name)
            return None
        entry.guard_for = state.qualname
    inputs = entry.guard.check(fn, args, kwargs)  # (a generated guard never raises)
    if inputs is None or not _inputs_match(entry.header.get("inputs"), inputs):
        return None
    return tuple(inputs)


def _inputs_match(stored: Any, inputs: tuple[Any, ...]) -> bool:
    """The call's graph inputs are what the entry was compiled for (its guard checked them
    already; a damaged entry is refused here rather than compiled for other inputs)."""
    if not isinstance(stored, list) or len(stored) != len(inputs):
        return False
    for meta, value in zip(stored, inputs, strict=True):
        if isinstance(meta, list):
            try:
                if _input_meta(value) != meta:
                    return False
            except Unstorable:
                return False
        elif type(meta) is not type(value) and not isinstance(value, torch.Tensor):
            return False
    return True


def _record(entry: _Entry, state: RecordOwner, inputs: tuple[Any, ...]) -> Record | None:
    """``entry``'s record built with ``state``'s backend, compiled for ``inputs``."""
    built = entry.built
    if state.backend == "eager" and built is not None and built.fork is not None:
        return built.fork()
    guard, entry.guard = entry.guard, None  # (the record takes it: a probe makes another)
    native = None
    if entry.native is not None and state.backend == "inductor":
        native = loaded_library(entry.name, entry.header, entry.native)
    if native is not None:
        try:
            return _build(entry, state, Prebuilt(native), list(inputs), guard)
        except Exception as exc:  # (the record is compiled as without the library)
            warn_once(f"its library cannot be used: {type(exc).__name__}: {exc}", entry.name)
    entry.native = None  # (not usable here: another platform, or it failed; the cache compiles)
    give_torch_its_artifacts()
    try:
        rec = _build(entry, state, state.backend, list(inputs), guard)
    except Exception as exc:  # (MagPyError included: the call is then monitored, as without it)
        entry.broken = True
        warn_once(f"its record cannot be compiled: {type(exc).__name__}: {exc}", entry.name)
        return None
    if state.backend == "eager":
        entry.built = rec
    return rec


# ----------------------------------------------------------------------------- clearing
def clear_stored() -> int:
    """``magpy.reset()``: delete the stored entries (``config.records_dir``'s and those of the
    directories compiled callables use) and forget the entries read; how many were deleted."""
    directories = {slot.directory for slot in list(_slots.values()) if slot.directory}
    if config.records_dir:
        directories.add(os.path.abspath(os.path.expanduser(config.records_dir)))
    with _load_lock:
        _loaded.clear()
    clear_bundled()
    for slot in list(_slots.values()):
        slot.used.clear()
        slot.kept.clear()
        slot.from_disk = 0
    clear_not_stored()
    return sum(clear_entries(d) for d in sorted(directories))


# ----------------------------------------------------------------------------- bundles
def used_entries() -> list[tuple[str, bytes]]:
    """The entries this process's compiled callables made (in the records directory, or kept
    in memory) or took (``magpy.save_cache_artifacts``), each checked again (format and
    digest): (file name, bytes)."""
    found: dict[str, bytes] = {}
    for slot in list(_slots.values()):
        for name in sorted(slot.used):
            kept = slot.kept.get(name)
            data = dict(bundled(slot.key_hash)).get(name) if kept is None else kept.entry(name)
            if data is None and slot.directory is not None:
                read = read_entry(Path(slot.directory) / name)
                if not isinstance(read, str):  # (the bytes checked, as the file holds them)
                    data = MAGIC + canonical(read[0]) + b"\n" + read[1]
            if data is not None and not isinstance(parse_entry(data), str):
                found[name] = data
    return sorted(found.items())
