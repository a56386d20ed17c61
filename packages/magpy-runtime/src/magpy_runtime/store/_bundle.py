"""Bundles: a process's compiled records as bytes, served by a process on another machine of the
same kind (``magpy.save_cache_artifacts`` / ``magpy.load_cache_artifacts``, the meaning of
``torch.compiler.save_cache_artifacts`` / ``load_cache_artifacts``).

A bundle holds the entries of the persistent records store (``_store``) that this process's
compiled callables made or took, from the records directory or, without one, kept in memory
(each with its library, when Inductor's graph was compiled ahead of time: for a record kept in
memory, when the bundle is saved), torch's own artifacts
(``torch.compiler.save_cache_artifacts()``: Inductor's and AOTAutograd's caches) and the guard
memo's C snapshot check, when it was built. Records are keyed by module, qualified name and a
digest of the code, never by a file's path: another checkout of the program finds them.

Threat model: a bundle is code. Its records are unpickled, its libraries and the snapshot check
are loaded into the process, torch unpickles its artifacts: load only bundles you trust, as
with the records directory. What loading guarantees is that nothing of a bundle is unpickled,
loaded or written before it passed, in this order: the format (``MAGIC``: another format or a
later version of this one is refused, never guessed at), the size, the digest (SHA-256 over
everything after the digest line; with ``key``, an HMAC-SHA256 under that key, so only a
holder of the key can make a bundle this process accepts: a bundle signed with a key is
refused without it, and an unsigned one when a key is given), then the header (plain JSON).
A bundle failing any of these raises ``BundleError`` and nothing of it is used. A bundle made
by another MagPy (its version and a digest of its sources), torch or Python, or with another
``magpy.config.speculate``, is ignored whole: ``BundleInfo.refused`` says why, and a warning.
Then each entry goes through the store's own checks when a call looks for it (its digest, its
versions, its key, the fingerprints of the user code it names) before it is unpickled; a
library is loaded only where it was made for the same machine and thread count.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any

import attrs
import torch

from magpy_codegen import install_snapcheck, snapcheck_artifact, wait_compiles

from .._config import config
from .._errors import BundleError
from .._logging import log
from ._entryfiles import canonical, parse_entry, versions
from ._store import add_bundled, build_kept_libraries, unstored, used_entries

__all__ = ["MAGIC", "BundleInfo", "load_cache_artifacts", "save_cache_artifacts"]

MAGIC = b"MAGPY-BUNDLE 1\n"
_FAMILY = b"MAGPY-BUNDLE "
MAX_BUNDLE_BYTES = 2 << 30
_MIN_KEY_BYTES = 16


@attrs.frozen
class BundleInfo:
    """What ``load_cache_artifacts`` took from a bundle: ``records``, the stored records it
    offers to this process's compiled callables; ``torch_artifacts``, whether it carries
    torch's (given to torch when a loaded record first needs Inductor); ``snapcheck``,
    whether it installed the C snapshot check; ``refused``, why the bundle was ignored
    (None: it was not)."""

    records: int = 0
    torch_artifacts: bool = False
    snapcheck: bool = False
    refused: str | None = None


def _settings() -> dict[str, Any]:
    """The configuration a bundle's records depend on (besides each record's key)."""
    return {"speculate": config.speculate}


def _mac(body: bytes, key: bytes | None) -> bytes:
    if key is None:
        return b"sha256:" + hashlib.sha256(body).hexdigest().encode()
    return b"hmac-sha256:" + hmac.new(key, body, hashlib.sha256).hexdigest().encode()


def _check_key(key: Any) -> bytes | None:
    if key is None:
        return None
    if not isinstance(key, bytes) or len(key) < _MIN_KEY_BYTES:
        raise ValueError(f"key must be bytes, at least {_MIN_KEY_BYTES} of them")
    return key


def save_cache_artifacts(*, key: bytes | None = None) -> bytes:
    """This process's compiled records as a bundle (module docstring), for
    ``load_cache_artifacts`` in a new process: the entries of the records store that its
    compiled callables made or took (in ``magpy.config.records_dir``, or kept in memory
    without one: no setup is needed), with torch's own artifacts. Builds the libraries of the
    records kept in memory, and waits for those being built. Records that cannot be stored
    are named, with the reason, in one warning. ``key`` (bytes, at least 16): sign the bundle
    with an HMAC-SHA256 that ``load_cache_artifacts`` checks."""
    key = _check_key(key)
    wait_compiles()
    build_kept_libraries()
    wait_compiles()
    left_out = unstored()
    if left_out:
        log.warning("save_cache_artifacts: not in the bundle: %s", "; ".join(left_out))
    sections: list[dict[str, Any]] = []
    parts: list[bytes] = []
    for name, data in used_entries():
        sections.append({"kind": "entry", "name": name, "bytes": len(data)})
        parts.append(data)
    saved = torch.compiler.save_cache_artifacts()
    if saved is not None and saved[0]:
        sections.append({"kind": "torch", "bytes": len(saved[0])})
        parts.append(saved[0])
    helper = snapcheck_artifact()
    if helper is not None:
        sections.append({"kind": "snapcheck", "name": helper[0], "bytes": len(helper[1])})
        parts.append(helper[1])
    header = {
        "format": 1,
        "versions": versions(),
        "config": _settings(),
        "sections": sections,
        "created": time.time(),
    }
    body = canonical(header) + b"\n" + b"".join(parts)
    return MAGIC + _mac(body, key) + b"\n" + body


def _verified(data: Any, key: bytes | None) -> tuple[dict[str, Any], bytes]:
    """The header and payload of ``data``, a bundle checked (format, size, digest or
    signature, header) before anything in it is used; raises ``BundleError``."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"a bundle is bytes, not {type(data).__name__}")
    data = bytes(data)
    if not data.startswith(MAGIC):
        if data.startswith(_FAMILY):
            version = data[len(_FAMILY) :].partition(b"\n")[0][:20].decode(errors="replace")
            raise BundleError(f"a bundle of format {version!r}: this MagPy reads format 1")
        raise BundleError("not a MagPy bundle (magpy.save_cache_artifacts makes them)")
    if len(data) > MAX_BUNDLE_BYTES:
        raise BundleError(f"the bundle is larger than {MAX_BUNDLE_BYTES >> 30} GiB")
    mac, _, body = data[len(MAGIC) :].partition(b"\n")
    scheme = mac.partition(b":")[0]
    if scheme not in (b"sha256", b"hmac-sha256"):
        raise BundleError(f"unknown digest {scheme[:20]!r}")
    if scheme == b"hmac-sha256" and key is None:
        raise BundleError("the bundle is signed: pass the key it was signed with (key=...)")
    if scheme == b"sha256" and key is not None:
        raise BundleError("the bundle is not signed, and a key was given: refused")
    if not hmac.compare_digest(mac, _mac(body, key)):
        what = "signature (HMAC-SHA256 under the key given)" if key else "SHA-256"
        raise BundleError(f"the {what} does not match the bundle's content: refused")
    header_line, _, payload = body.partition(b"\n")
    try:
        header = json.loads(header_line)
    except ValueError:
        header = None
    if not _valid_header(header, len(payload)):
        raise BundleError("the bundle's header is damaged")
    return header, payload


def _valid_header(header: Any, size: int) -> bool:
    if not isinstance(header, dict) or header.get("format") != 1:
        return False
    sections = header.get("sections")
    if not isinstance(sections, list) or not all(
        isinstance(s, dict)
        and s.get("kind") in ("entry", "torch", "snapcheck")
        and type(s.get("bytes")) is int
        and s["bytes"] >= 0
        and (s["kind"] == "torch" or _plain_name(s.get("name")))
        for s in sections
    ):
        return False
    return sum(s["bytes"] for s in sections) == size


def _plain_name(name: Any) -> bool:
    """A file name with no directory in it (a bundle names the files it installs)."""
    return isinstance(name, str) and 0 < len(name) < 200 and "/" not in name and name[0] != "."


def load_cache_artifacts(data: bytes, *, key: bytes | None = None) -> BundleInfo:
    """Offer the records of bundle ``data`` (``save_cache_artifacts``) to this process's
    compiled callables, those compiled before this call included (on their next miss): a call
    whose key and guard one passes is served by it, without being monitored. Verified first
    (module docstring): raises ``BundleError`` for a bundle that is not one, damaged, or not
    signed with ``key``; a bundle of other versions or settings is ignored
    (``BundleInfo.refused``). A bundle is code: load only trusted ones."""
    header, payload = _verified(data, _check_key(key))
    mine = {"versions": versions(), "config": _settings()}
    made = {"versions": header.get("versions"), "config": header.get("config")}
    if made != mine:
        reason = f"made with other versions or settings ({made}; this process: {mine})"
        log.warning("load_cache_artifacts: bundle ignored: %s", reason)
        return BundleInfo(refused=reason)
    entries: list[tuple[str, bytes]] = []
    torch_part: bytes | None = None
    installed = False
    at = 0
    for section in header["sections"]:
        part = payload[at : at + section["bytes"]]
        at += section["bytes"]
        if section["kind"] == "entry":
            read = parse_entry(part)
            if isinstance(read, str):  # (covered by the bundle's digest: made damaged)
                raise BundleError(f"entry {section['name']}: {read}")
            entries.append((section["name"], part))
        elif section["kind"] == "torch":
            torch_part = part
        else:
            installed = install_snapcheck(section["name"], part)
    add_bundled(entries, torch_part)
    return BundleInfo(len(entries), torch_part is not None, installed)
