"""A streamed request the upstream cuts before its first event, near the window it serves (llama-cpp-python's way)."""

from __future__ import annotations

from collections.abc import Callable

import openai

from contextwarden.settings import Settings
from contextwarden.testing import ScriptedOpenAIServer

from .conftest import MODEL, SYSTEM, Running, make_settings, user


def test_an_empty_stream_near_the_served_window_is_compacted_and_retried(
    service_factory: Callable[[Settings], Running], sqlite_url: str
) -> None:
    with ScriptedOpenAIServer.llama_cpp_python(n_ctx=2_000, default="fits", model=MODEL) as upstream:
        service = service_factory(make_settings(sqlite_url, upstream.base_url, window=8_000))
        client = openai.OpenAI(
            base_url=f"{service.url}/v1", api_key="unused", default_headers={"X-Session-Id": "cut"}, max_retries=0
        )
        history = [SYSTEM]
        with client:
            for turn in range(12):
                history.append(user(f"note {turn} " + "the parser builds a tree of nodes. " * 20))
                stream = client.chat.completions.create(model=MODEL, messages=history, stream=True)  # type: ignore[arg-type]
                text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
                assert text == "fits", f"turn {turn}"
                history.append({"role": "assistant", "content": text})
        served = [
            r for r in upstream.received if r.path.endswith("/completions") and not r.path.endswith("chat/completions")
        ]
        assert served  # the upstream was asked for its window once
