"""What one service process holds: settings, store, open sessions, events, metrics, limits, upstream."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from starlette.requests import HTTPConnection

from ..events import Event, event_to_dict
from ..health import HealthMonitor
from ..session import AsyncSession
from ..settings import Settings
from ..stores import AsyncSessionStore
from .auth import Tenants
from .events import LocalHub, RedisHub
from .limits import Concurrency
from .metrics import ServiceMetrics
from .redact import Redactor
from .sessions import SessionPool
from .upstream import Upstream

__all__ = ["ServiceState", "state_of"]

logger = logging.getLogger("contextwarden.service")


@dataclass(eq=False, kw_only=True)
class ServiceState:
    """The app's shared objects (``app.state.service``)."""

    settings: Settings
    store: AsyncSessionStore
    pool: SessionPool
    hub: LocalHub | RedisHub
    metrics: ServiceMetrics
    tenants: Tenants
    limits: Concurrency
    upstream: Upstream
    monitors: dict[tuple[str, str], HealthMonitor] = field(default_factory=dict)
    redactor: Redactor = field(default_factory=Redactor)
    """Takes credentials out of upstream texts before a client or a log sees them."""

    def watch(self, tenant: str, session_id: str, session: AsyncSession | None) -> None:
        """A health monitor for each open session (its totals feed /metrics); detached when it closes."""
        old = self.monitors.pop((tenant, session_id), None)
        if old is not None:
            old.detach()
        if session is not None:
            self.monitors[(tenant, session_id)] = HealthMonitor(session, process=self.metrics.health)

    def on_event(self, tenant: str, session_id: str, event: Event) -> None:
        """Every session event: to the metrics and to the SSE hub."""
        try:
            self.metrics.observe_event(tenant, session_id, event)
            record = event_to_dict(event)
            if "session_id" in record:  # the session knows its store key; clients know their own id
                record["session_id"] = session_id
            self.hub.publish(tenant, session_id, record)
        except Exception:  # events must never break a request
            logger.exception("event of session %s could not be published", session_id)


def state_of(conn: HTTPConnection) -> ServiceState:
    """The service state of the app serving ``conn``."""
    state: ServiceState = conn.app.state.service
    return state
