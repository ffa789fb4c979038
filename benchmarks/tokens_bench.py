"""Token accounting benchmarks: incremental cost, backend throughput, heuristic error.

    .venv/bin/python -m benchmarks.tokens_bench --json bench-out/tokens.json
    .venv/bin/python -m benchmarks.tokens_bench --hf-tokenizer-json /path/to/tokenizer.json

1. Incremental accounting on the trim workload (`benchmarks.workload`: the reference harness
   ``peers_bench.py`` when given or found beside the repository, else the built-in one; N=5000
   messages): the session is counted once with `TokenAccountant` (tiktoken cl100k, OpenAI framing);
   then each of the last R rounds is added as a fresh round and counted. Its cost is compared with
   tokenizing only that round's new text (contents, tool names, arguments) with bare tiktoken
   ``encode_ordinary`` in the same run. Each round is timed in several repetitions (fresh messages
   and a fresh cache each time) and the fastest is kept, for both sides. Target: ratio <= 1.2.
2. Throughput (tokens/s, MB/s) of each counter backend against bare tiktoken on the same texts.
3. Error of the heuristic counter against cl100k per text kind (prose, code, logs, JSON, Chinese).

Not a timed test: numbers depend on the machine; compare the ratios within one run.
"""

from __future__ import annotations

import argparse
import gc
import glob
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.workload import Workload, load_workload
from contextwarden.messages import Message, TextPart, ToolCall
from contextwarden.tokens import HeuristicCounter, TokenAccountant, TokenCounter, get_counter
from contextwarden.tokens.tiktoken import TiktokenCounter

ROOT = Path(__file__).resolve().parents[1]


def to_message(m: dict[str, Any]) -> Message:
    """A harness dict as a contextwarden `Message` (done before timing, as the harness does for peers)."""
    calls = tuple(
        ToolCall(call_id=c["id"], name=c["name"], arguments=c["arguments"]) for c in m.get("tool_calls") or ()
    )
    text = m.get("content") or ""
    parts = ((TextPart(text=text),) if text else ()) + calls
    return Message(role=m["role"], parts=parts, tool_call_id=m.get("tool_call_id"), name=m.get("name"))


def round_texts(msgs: Sequence[dict[str, Any]]) -> list[str]:
    """The new text of a round, as the harness tokenizes it (contents, tool names, arguments)."""
    out: list[str] = []
    for m in msgs:
        out.append(m.get("content") or "")
        for c in m.get("tool_calls") or ():
            out.append(c["name"])
            out.append(c["arguments"])
    return out


# --- 1. incremental accounting ---------------------------------------------------------------------------


def bench_incremental(pb: Workload, enc: Any, *, size: int, seed: int, last: int, reps: int) -> dict[str, Any]:
    canon, rounds = pb.build_conversation(size, seed)
    last = min(last, len(rounds) - 2)
    prefix_end = rounds[-last][0]
    counter = get_counter("tiktoken:cl100k_base")
    texts_per_round = [round_texts(canon[s:e]) for s, e in rounds[-last:]]
    encode = enc.encode_ordinary

    best_raw = [float("inf")] * last
    best_acc = [float("inf")] * last
    first_count_s: list[float] = []
    raw_session_s: list[float] = []
    hit_recount_s: list[float] = []
    mismatches = 0
    for _ in range(reps):
        messages = [to_message(m) for m in canon]  # fresh objects: no content hash cached yet
        acc = TokenAccountant(counter)
        count_message = acc.count_message
        gc.collect()
        gc.disable()
        try:
            t0 = time.perf_counter()
            running = acc.count_messages(messages[:prefix_end])
            first_count_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            for t in round_texts(canon[:prefix_end]):
                len(encode(t))
            raw_session_s.append(time.perf_counter() - t0)
            for i, (s, e) in enumerate(rounds[-last:]):
                texts = texts_per_round[i]
                new = messages[s:e]
                # Alternate which side runs first so neither always gets the warmer CPU caches.
                for side in (0, 1) if i % 2 == 0 else (1, 0):
                    if side == 0:
                        t0 = time.perf_counter()
                        n_raw = 0
                        for t in texts:
                            n_raw += len(encode(t))
                        dt = time.perf_counter() - t0
                        best_raw[i] = min(best_raw[i], dt)
                    else:
                        t0 = time.perf_counter()
                        added = 0
                        for m in new:
                            added += count_message(m)
                        dt = time.perf_counter() - t0
                        best_acc[i] = min(best_acc[i], dt)
                running += added
                mismatches += added != sum(pb.message_tokens(enc, m) for m in canon[s:e])
            # A full recount of the session once every message is cached: the cache-hit path.
            t0 = time.perf_counter()
            total = acc.count_messages(messages)
            hit_recount_s.append(time.perf_counter() - t0)
        finally:
            gc.enable()
        # count_messages(prefix) already holds the reply priming; every added round was summed on top.
        assert total == running, (total, running)
    ratios = sorted(a / r for a, r in zip(best_acc, best_raw, strict=True))
    round_tokens = [sum(len(encode(t)) for t in texts) for texts in texts_per_round]
    return {
        "size": size,
        "messages": len(canon),
        "rounds_measured": last,
        "reps": reps,
        "prefix_messages": prefix_end,
        "session_tokens": total,
        "first_count_ms": min(first_count_s) * 1e3,
        "raw_tiktoken_session_ms": min(raw_session_s) * 1e3,
        "first_count_ratio": min(first_count_s) / min(raw_session_s),
        "cached_recount_ms": min(hit_recount_s) * 1e3,
        "cached_ns_per_message": min(hit_recount_s) / len(canon) * 1e9,
        "round_tokens_median": statistics.median(round_tokens),
        "round_raw_us_median": statistics.median(best_raw) * 1e6,
        "round_acc_us_median": statistics.median(best_acc) * 1e6,
        "ratio_median": statistics.median(ratios),
        "ratio_p90": ratios[int(0.9 * (len(ratios) - 1))],
        "ratio_of_sums": sum(best_acc) / sum(best_raw),
        "count_mismatches_vs_harness": mismatches,
        "target_ratio": 1.2,
    }


# --- 2. throughput ---------------------------------------------------------------------------------------


def bench_throughput(pb: Workload, enc: Any, *, size: int, seed: int, reps: int, hf_json: str | None) -> dict[str, Any]:
    canon, _ = pb.build_conversation(size, seed)
    texts = [t for t in round_texts(canon) if t]
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    rows: list[dict[str, Any]] = []

    def run(label: str, fn: Callable[[], int], note: str = "") -> None:
        best = float("inf")
        tokens = 0
        for _ in range(reps):
            gc.collect()
            t0 = time.perf_counter()
            tokens = fn()
            best = min(best, time.perf_counter() - t0)
        rows.append(
            {
                "backend": label,
                "seconds": best,
                "tokens": tokens,
                "tokens_per_s": tokens / best,
                "MB_per_s": nbytes / best / 1e6,
                "note": note,
            }
        )

    encode = enc.encode_ordinary
    run("bare tiktoken cl100k encode_ordinary", lambda: sum(len(encode(t)) for t in texts))
    cl100k = get_counter("tiktoken:cl100k_base")
    engine = cl100k.engine if isinstance(cl100k, TiktokenCounter) else "tiktoken"
    run(f"TiktokenCounter cl100k .count_text ({engine})", lambda: sum(map(cl100k.count_text, texts)))
    if engine != "tiktoken":
        plain = TiktokenCounter(enc, engine="tiktoken")
        run("TiktokenCounter cl100k .count_text (tiktoken)", lambda: sum(map(plain.count_text, texts)))

    def accountant_cold_prebuilt(msgs_holder: list[list[Message]]) -> Callable[[], int]:
        def fn() -> int:
            acc = TokenAccountant(cl100k)
            msgs = msgs_holder.pop()
            return acc.count_messages(msgs) - acc.framing.reply_priming

        return fn

    holders = [[to_message(m) for m in canon] for _ in range(reps)]
    run(
        "TokenAccountant cl100k count_message (cold cache)",
        accountant_cold_prebuilt(holders),
        "tokens include framing; fresh messages and cache per rep",
    )
    warm = TokenAccountant(cl100k)
    warm_msgs = [to_message(m) for m in canon]
    warm.count_messages(warm_msgs)
    run(
        "TokenAccountant cl100k count_message (warm cache)",
        lambda: warm.count_messages(warm_msgs) - warm.framing.reply_priming,
        "every message a cache hit",
    )
    heur = HeuristicCounter()
    run("HeuristicCounter .count_text", lambda: sum(map(heur.count_text, texts)), "its own estimate of the tokens")
    if hf_json:
        hf = get_counter(f"hf:{hf_json}")
        run(f"HFCounter ({Path(hf_json).parent.name}/tokenizer.json)", lambda: sum(map(hf.count_text, texts)))
        tk = hf.tokenizer  # type: ignore[attr-defined]
        run(
            "bare HF tokenizers encode",
            lambda: sum(len(tk.encode(t, add_special_tokens=False)) for t in texts),
        )
    else:
        rows.append({"backend": "HFCounter", "skipped": "no tokenizer.json: pass --hf-tokenizer-json PATH"})
    base = rows[0]["seconds"]
    for r in rows:
        if "seconds" in r:
            r["speed_vs_bare_tiktoken"] = base / r["seconds"]
    return {"texts": len(texts), "bytes": nbytes, "rows": rows}


# --- 3. heuristic error -----------------------------------------------------------------------------------

ZH = [
    "我们在周二上午发现订单服务的响应时间明显变长，平均延迟从八十毫秒上升到了六百毫秒左右。排查之后，发现数据库"
    "连接池在高峰期被占满，新的请求只能排队等待。临时的解决办法是把连接池的上限从二十调整到五十，同时给慢查询加上索引。",
    "请先阅读项目根目录下的说明文档，然后按照步骤安装依赖。如果安装过程中出现网络错误，可以换一个镜像源再试一次。"
    "安装完成后运行测试命令，确认所有测试都通过，再开始修改代码。",
    "这次会议主要讨论了下个季度的产品规划。市场部希望尽快推出移动端的新版本，而研发团队认为应该先解决现有系统的"
    "稳定性问题。经过讨论，大家同意把前两周用于修复已知缺陷，之后再投入新功能的开发。",
    "用户反馈说，在上传较大的文件时，页面会卡住几秒钟，然后提示上传失败。我们检查了服务器日志，发现请求在网关层"
    "就被拒绝了，原因是请求体超过了默认的十兆字节限制。修改配置之后，这个问题已经解决。",
    "人工智能助手在处理长对话时，需要在有限的上下文窗口里保留最重要的信息。常见的做法包括删除较早的消息、对历史"
    "内容进行摘要，以及把关键事实写入长期记忆。每种方法都有代价：删除会丢失细节，摘要可能引入错误。",
    "昨天晚上下了一场大雨，早上出门的时候路上到处都是积水。公交车比平时晚了二十分钟，我差点没赶上九点的会议。"
    "好在同事帮我先把资料准备好了，会议进行得很顺利。",
    "根据合同的约定，乙方应当在收到付款后的十五个工作日内完成交付。如果因为乙方的原因导致延期，每延期一天，需要"
    "按照合同总金额的千分之五支付违约金，但违约金的总额不超过合同金额的百分之十。",
    "这个函数的作用是读取配置文件并返回一个字典。它会先检查文件是否存在，如果不存在就使用默认配置；如果文件格式"
    "不正确，就抛出异常并给出具体的行号，方便用户定位问题。",
    "春节期间，很多人选择回老家和家人团聚。火车站和机场的客流量比平时增加了好几倍，铁路部门提前加开了临时列车，"
    "并延长了售票窗口的营业时间，尽量让旅客都能顺利回家。",
    "在代码审查的时候，请重点关注错误处理和边界条件。比如输入为空、数值溢出、网络超时这些情况，都应该有明确的"
    "处理方式，并且写上对应的测试用例。不要只测试正常的流程。",
]


def _gen_logs(rng: random.Random, n: int) -> list[str]:
    levels = ["INFO", "INFO", "INFO", "DEBUG", "WARNING", "ERROR"]
    out = []
    for _ in range(n):
        lines = []
        for _ in range(rng.randint(10, 80)):
            ts = f"2025-03-{rng.randint(10, 28)} {rng.randint(10, 23)}:{rng.randint(10, 59)}:{rng.randint(10, 59)}"
            shape = rng.randrange(4)
            if shape == 0:
                lines.append(
                    f"{ts},{rng.randint(100, 999)} {rng.choice(levels)} app.worker: processed job "
                    f"{rng.getrandbits(32):08x} in {rng.randint(1, 900)}ms (queue={rng.randint(0, 50)})"
                )
            elif shape == 1:
                lines.append(
                    f'10.0.{rng.randint(0, 255)}.{rng.randint(0, 255)} - - [{ts}] "GET /api/v1/orders/'
                    f'{rng.randint(1000, 99999)} HTTP/1.1" {rng.choice([200, 404, 500])} {rng.randint(200, 9000)}'
                )
            elif shape == 2:
                lines.append(
                    f"{ts} ERROR Traceback (most recent call last):\n"
                    f'  File "/srv/app/handlers.py", line {rng.randint(10, 400)}, in handle\n'
                    f"    result = self.client.fetch(order_id)\n"
                    f"TimeoutError: request to inventory timed out after {rng.randint(5, 30)}s"
                )
            else:
                lines.append(
                    f"level=info ts={ts.replace(' ', 'T')}Z caller=scrape.go:{rng.randint(100, 999)} "
                    f'component="scrape manager" target=http://node-{rng.randint(1, 40)}:9100/metrics '
                    f"duration_seconds=0.{rng.randint(1000, 9999)}"
                )
        out.append("\n".join(lines))
    return out


def collect_samples(pb: Workload, shared: Path | None) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Samples per kind, and where each kind's samples came from."""
    rng = random.Random(7)
    kinds: dict[str, list[str]] = {"prose": [], "code": [], "logs": [], "json": [], "chinese": []}
    sources: dict[str, list[str]] = {k: [] for k in kinds}
    # the shared data sets beside the reference harness, when it is used; the generators alone otherwise
    tau = shared / "datasets" / "probe-traces" / "tau-airline-dev.jsonl" if shared else None
    locomo = shared / "datasets" / "locomo" / "locomo-dev.json" if shared else None
    # prose: real dialogue and summaries, support-agent turns, design docs, and the harness generator
    if locomo is not None and locomo.is_file():
        for conv in json.loads(locomo.read_text()):
            for key, value in conv["conversation"].items():
                if key.startswith("session_") and isinstance(value, list):
                    kinds["prose"].append("\n".join(f"{t['speaker']}: {t['text']}" for t in value))
            kinds["prose"] += [v for v in (conv.get("session_summary") or {}).values() if isinstance(v, str)]
        sources["prose"].append("LoCoMo dialogues and session summaries")
    if tau is not None and tau.is_file():
        for line in tau.read_text().splitlines():
            for m in json.loads(line)["messages"]:
                content = m.get("content")
                if not isinstance(content, str) or len(content) < 80:
                    continue
                if m["role"] in ("user", "assistant"):
                    kinds["prose"].append(content)
                elif m["role"] == "tool" and content[:1] in "{[":
                    kinds["json"].append(content)
                    try:
                        kinds["json"].append(json.dumps(json.loads(content), indent=2))
                    except ValueError:
                        pass
        sources["prose"].append("tau-bench airline user/assistant turns")
        sources["json"].append("tau-bench airline tool outputs (compact and indented)")
    for doc in sorted((shared / "docs").glob("*.md")) if shared else ():
        kinds["prose"] += [p for p in doc.read_text().split("\n\n") if len(p) > 200]
        sources["prose"].append(f"shared/docs/{doc.name} paragraphs")
    kinds["prose"] += [pb.text_makers()["prose"](rng, rng.randint(50, 800)) for _ in range(40)]
    sources["prose"].append("the workload's prose generator")
    # code: this repository and the standard library
    for path in sorted((ROOT / "src" / "contextwarden").rglob("*.py")):
        if path.stat().st_size > 500:
            kinds["code"].append(path.read_text())
    sources["code"].append("contextwarden sources")
    stdlib = Path(json.__file__).resolve().parents[1]
    for name in ("json", "asyncio", "email", "logging", "http"):
        for path in sorted((stdlib / name).glob("*.py"))[:8]:
            kinds["code"].append(path.read_text(errors="replace"))
    sources["code"].append("Python stdlib (json, asyncio, email, logging, http)")
    kinds["code"] += [pb.text_makers()["code"](rng, rng.randint(50, 1500)) for _ in range(20)]
    sources["code"].append("the workload's code generator")
    # logs
    kinds["logs"] += [pb.text_makers()["log"](rng, rng.randint(50, 1500)) for _ in range(30)]
    kinds["logs"] += _gen_logs(rng, 30)
    sources["logs"] += ["the workload's log generator", "app/access/traceback/logfmt generator"]
    # JSON: also the harness's tool-call arguments
    canon, _ = pb.build_conversation(300, 1)
    kinds["json"] += [c["arguments"] for m in canon for c in m.get("tool_calls") or ()]
    sources["json"].append("the workload's tool-call arguments")
    # Chinese
    kinds["chinese"] += ZH
    sources["chinese"].append("hand-written paragraphs (news, support, contract, instructions)")
    cjk = sorted(glob.glob(str(stdlib / "test" / "cjkencodings" / "*-utf8.txt")))
    picked = [p for p in cjk if any(k in Path(p).name for k in ("gb2312", "gb18030", "gbk", "big5-"))]
    for p in picked:
        kinds["chinese"].append(Path(p).read_text(encoding="utf-8"))
    if picked:
        sources["chinese"].append("CPython test/cjkencodings (gb2312, gbk, gb18030, big5)")
    kinds["chinese"] += [pb.text_makers()["zh"](rng, rng.randint(50, 800)) for _ in range(20)]
    sources["chinese"].append("the workload's Chinese generator (random frequent Han)")
    return kinds, sources


def bench_heuristic_error(
    pb: Workload, cl100k: TokenCounter, shared: Path | None, *, size: int, seed: int
) -> dict[str, Any]:
    kinds, sources = collect_samples(pb, shared)
    heur = HeuristicCounter()
    table: dict[str, Any] = {}
    for kind, texts in kinds.items():
        texts = [t for t in texts if t.strip()]
        real = [cl100k.count_text(t) for t in texts]
        est = [heur.count_text(t) for t in texts]
        per = sorted(e / r - 1 for e, r in zip(est, real, strict=True) if r)
        table[kind] = {
            "samples": len(texts),
            "chars": sum(map(len, texts)),
            "cl100k_tokens": sum(real),
            "heuristic_tokens": sum(est),
            "error": sum(est) / sum(real) - 1,
            "p5": per[int(0.05 * (len(per) - 1))],
            "median": statistics.median(per),
            "p95": per[int(0.95 * (len(per) - 1))],
            "mean_abs": statistics.fmean(abs(x) for x in per),
            "sources": sources[kind],
        }
    canon, _ = pb.build_conversation(size, seed)
    texts = [t for t in round_texts(canon) if t]
    real_total = sum(map(cl100k.count_text, texts))
    table[f"trim workload session (N={size})"] = {
        "samples": len(texts),
        "cl100k_tokens": real_total,
        "heuristic_tokens": sum(map(heur.count_text, texts)),
        "error": sum(map(heur.count_text, texts)) / real_total - 1,
    }
    return table


# --- report -------------------------------------------------------------------------------------------------


def print_report(res: dict[str, Any]) -> None:
    inc = res["incremental"]
    print(
        f"\n1. Incremental accounting (trim workload N={inc['size']}, {inc['messages']} messages, "
        f"{inc['session_tokens']:,} tokens; last {inc['rounds_measured']} rounds, best of {inc['reps']})"
    )
    print(
        f"   first count of the session: {inc['first_count_ms']:.1f} ms "
        f"(bare tiktoken on the same text {inc['raw_tiktoken_session_ms']:.1f} ms, x{inc['first_count_ratio']:.2f})"
    )
    print(
        f"   cached recount of the whole session: {inc['cached_recount_ms']:.2f} ms "
        f"({inc['cached_ns_per_message']:.0f} ns/message)"
    )
    print(
        f"   added round (median {inc['round_tokens_median']:.0f} tokens): accountant "
        f"{inc['round_acc_us_median']:.1f} us vs bare tiktoken {inc['round_raw_us_median']:.1f} us"
    )
    print(
        f"   ratio accountant/bare: median {inc['ratio_median']:.3f}, p90 {inc['ratio_p90']:.3f}, "
        f"sum {inc['ratio_of_sums']:.3f}  (target <= {inc['target_ratio']})  "
        f"count mismatches vs harness: {inc['count_mismatches_vs_harness']}"
    )
    thr = res["throughput"]
    print(f"\n2. Throughput ({thr['texts']} texts, {thr['bytes'] / 1e6:.1f} MB)")
    print(f"   {'backend':58s} {'tokens/s':>12s} {'MB/s':>7s} {'vs bare':>8s}")
    for r in thr["rows"]:
        if "skipped" in r:
            print(f"   {r['backend']:58s} skipped: {r['skipped']}")
            continue
        print(
            f"   {r['backend']:58s} {r['tokens_per_s']:12,.0f} {r['MB_per_s']:7.2f} {r['speed_vs_bare_tiktoken']:7.2f}x"
        )
    print("\n3. Heuristic counter vs cl100k (error = heuristic / cl100k - 1; per-sample percentiles)")
    print(
        f"   {'kind':30s} {'samples':>7s} {'cl100k':>10s} {'heuristic':>10s} {'error':>7s} "
        f"{'p5':>7s} {'median':>7s} {'p95':>7s}"
    )
    for kind, r in res["heuristic_error"].items():
        extra = f" {r['p5']:+7.1%} {r['median']:+7.1%} {r['p95']:+7.1%}" if "p5" in r else ""
        print(
            f"   {kind:30s} {r['samples']:7d} {r['cl100k_tokens']:10,d} {r['heuristic_tokens']:10,d} "
            f"{r['error']:+7.1%}{extra}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.tokens_bench", description=__doc__.split("\n")[0])
    ap.add_argument(
        "--bench-script",
        default=None,
        help="path of the reference peers_bench.py, or 'builtin' (default: ../shared/bench/peers_bench.py "
        "when it exists, else the built-in workload)",
    )
    ap.add_argument("--size", type=int, default=5000, help="messages in the session (default %(default)s)")
    ap.add_argument("--seed", type=int, default=20240601, help="the harness's default seed")
    ap.add_argument("--rounds", type=int, default=200, help="last rounds measured as 'the added round'")
    ap.add_argument("--reps", type=int, default=5, help="repetitions (fastest kept)")
    ap.add_argument("--hf-tokenizer-json", default=None, help="a local tokenizer.json for the HF row")
    ap.add_argument("--json", dest="json_out", help="write the results to this JSON file")
    args = ap.parse_args(argv)

    pb = load_workload(args.bench_script)
    enc = pb.get_encoding()  # bare tiktoken, loaded the workload's way
    shared = pb.shared_root
    hf_json = pb.hf_tokenizer_json(args.hf_tokenizer_json)
    res = {
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "workload": pb.source,
        "incremental": bench_incremental(pb, enc, size=args.size, seed=args.seed, last=args.rounds, reps=args.reps),
        "throughput": bench_throughput(pb, enc, size=args.size, seed=args.seed, reps=3, hf_json=hf_json),
        "heuristic_error": bench_heuristic_error(
            pb, get_counter("tiktoken:cl100k_base"), shared, size=args.size, seed=args.seed
        ),
    }
    print_report(res)
    if args.json_out:
        out = Path(args.json_out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=2))
        print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
