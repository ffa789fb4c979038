"""MemoryRecord to and from JSON (what the SQL backends store)."""

from __future__ import annotations

import json
from typing import Any

from ..exceptions import MemoryRecordError, SchemaError
from .checks import check_record
from .records import MemoryRecord

__all__ = ["decode_record", "encode_record"]


def encode_record(record: MemoryRecord) -> str:
    """The record as a JSON object."""
    return json.dumps(
        {
            "text": record.text,
            "memory_id": record.memory_id,
            "tenant": record.tenant,
            "session_id": record.session_id,
            "message_ids": list(record.message_ids),
            "created_at": record.created_at,
            "last_access": record.last_access,
            "importance": record.importance,
            "role": record.role,
            "speaker": record.speaker,
            "position": record.position,
            "group": record.group,
            "subject": record.subject,
            "supersedes": list(record.supersedes),
            "superseded_by": record.superseded_by,
            "metadata": dict(record.metadata),
        },
        ensure_ascii=False,
    )


def decode_record(text: str | bytes) -> MemoryRecord:
    """The record a JSON object describes; `SchemaError` for anything else."""
    try:
        data: dict[str, Any] = json.loads(text)
        data["message_ids"] = tuple(data.get("message_ids", ()))
        data["supersedes"] = tuple(data.get("supersedes", ()))
        return check_record(MemoryRecord(**data))
    except (ValueError, TypeError, MemoryRecordError) as exc:
        raise SchemaError(f"A stored memory cannot be read ({exc}); the row is corrupted.") from exc
