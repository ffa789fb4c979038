"""Deterministic text samples of each kind, for counter accuracy tests."""

from __future__ import annotations

import json
import random
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "contextwarden"

PROSE = [
    "The migration finished late on Thursday evening, and for a while everything looked fine. Then the "
    "support queue started filling up with reports of missing invoices. It turned out that the old system "
    "had stored amounts in cents while the new one expected dollars, so every invoice under one dollar had "
    "been silently rounded down to zero and filtered out of the monthly report.",
    "When you plan a long hike, start by checking the weather forecast for the whole route, not just the "
    "trailhead. Mountain weather changes quickly, and a sunny morning in the valley can turn into a cold, "
    "windy afternoon on the ridge. Pack an extra layer, more water than you think you need, and let someone "
    "know when you expect to be back.",
    "I told her I would call back after lunch, but the meeting ran over and by the time I remembered it was "
    "almost six. She wasn't upset, though. She said the kids had kept her busy all day anyway and that we "
    "could talk about the garden plans over the weekend instead.",
    "Our recommendation is to keep the first version small. Ship the feature to a handful of internal "
    "users, collect feedback for two weeks, and only then decide whether the extra configuration options "
    "are worth the maintenance cost. Most of the requests we received so far can be handled with sensible "
    "defaults and a clear error message.",
    "The committee reviewed forty-two proposals this year, up from thirty-one last year. Eleven were "
    "funded in full, nine received partial funding, and the rest were encouraged to resubmit with a "
    "narrower scope. Several reviewers noted that the strongest proposals described concrete milestones "
    "and explained how success would be measured.",
]

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
    "根据合同的约定，乙方应当在收到付款后的十五个工作日内完成交付。如果因为乙方的原因导致延期，每延期一天，需要"
    "按照合同总金额的千分之五支付违约金，但违约金的总额不超过合同金额的百分之十。",
]


def code_samples() -> list[str]:
    """This repository's own Python sources."""
    return [p.read_text() for p in sorted(SRC.rglob("*.py")) if p.stat().st_size > 500][:40]


def log_samples(seed: int = 1) -> list[str]:
    """Service logs in three common shapes."""
    rng = random.Random(seed)
    levels = ["INFO", "INFO", "INFO", "DEBUG", "WARNING", "ERROR"]
    out = []
    for _ in range(6):
        lines = []
        for _ in range(40):
            ts = f"2025-03-{rng.randint(10, 28)} {rng.randint(10, 23)}:{rng.randint(10, 59)}:{rng.randint(10, 59)}"
            shape = rng.randrange(3)
            if shape == 0:
                lines.append(
                    f"{ts},{rng.randint(100, 999)} {rng.choice(levels)} app.worker: processed job "
                    f"{rng.getrandbits(32):08x} in {rng.randint(1, 900)}ms (queue={rng.randint(0, 50)})"
                )
            elif shape == 1:
                lines.append(
                    f'10.0.{rng.randint(0, 255)}.{rng.randint(0, 255)} - - [{ts}] "GET /api/v1/orders/'
                    f'{rng.randint(1000, 99999)} HTTP/1.1" {rng.choice([200, 200, 404, 500])} {rng.randint(200, 9000)}'
                )
            else:
                lines.append(
                    f"{ts} ERROR Traceback (most recent call last):\n"
                    f'  File "/srv/app/handlers.py", line {rng.randint(10, 400)}, in handle\n'
                    f"    result = self.client.fetch(order_id)\n"
                    f"TimeoutError: request to inventory timed out after {rng.randint(5, 30)}s"
                )
        out.append("\n".join(lines))
    return out


def json_samples(seed: int = 2) -> list[str]:
    """Tool outputs as JSON, compact and indented."""
    rng = random.Random(seed)
    cities = ["SFO", "JFK", "ORD", "SEA", "BOS", "DEN", "LAX", "MIA"]
    names = ["Mia", "Omar", "Chen", "Sofia", "Liam", "Aisha", "Noah", "Yuki"]
    out = []
    for _ in range(8):
        record = {
            "reservation_id": f"{rng.getrandbits(24):06X}",
            "user_id": f"{rng.choice(names).lower()}_{rng.randint(1000, 9999)}",
            "origin": rng.choice(cities),
            "destination": rng.choice(cities),
            "flight_type": rng.choice(["one_way", "round_trip"]),
            "cabin": rng.choice(["basic_economy", "economy", "business"]),
            "flights": [
                {
                    "flight_number": f"HAT{rng.randint(1, 300):03d}",
                    "date": f"2024-05-{rng.randint(10, 28)}",
                    "price": rng.randint(50, 2000),
                    "status": rng.choice(["available", "delayed", "on time"]),
                }
                for _ in range(rng.randint(1, 4))
            ],
            "passengers": [
                {
                    "first_name": rng.choice(names),
                    "last_name": "Li",
                    "dob": f"19{rng.randint(50, 99)}-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}",
                }
                for _ in range(rng.randint(1, 3))
            ],
            "payment_history": [
                {"payment_id": f"credit_card_{rng.randint(1000000, 9999999)}", "amount": rng.randint(100, 5000)}
            ],
            "insurance": rng.choice(["yes", "no"]),
        }
        out.append(json.dumps(record))
        out.append(json.dumps(record, indent=2))
    return out


def samples() -> dict[str, list[str]]:
    """Every kind."""
    return {"prose": PROSE, "code": code_samples(), "logs": log_samples(), "json": json_samples(), "zh": ZH}
