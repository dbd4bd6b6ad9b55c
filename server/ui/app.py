"""The dashboard at /ui/ (DESIGN section 14): server-rendered pages over the same core operations the tools
call, forms for the operator's actions, and one event stream per page fed by the change feed.

Each handler is a module-level function grouped by what it does (pages.py reads, forms.py changes, login.py,
stream.py); endpoint.py turns one into a route; what they share is the Dashboard (dashboard.py) this app holds
on its state."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from server.ui import forms, pages
from server.ui.dashboard import HERE, Dashboard
from server.ui.endpoint import page
from server.ui.login import login, logout
from server.ui.stream import EventStream

GET, POST = ["GET"], ["POST"]


def build_ui(dashboard: Dashboard) -> Starlette:
    """The dashboard's routes, each handler reaching `dashboard` through its request's app."""
    routes = [
        Route("/", page(pages.overview), methods=GET),
        Route("/queue", page(pages.queue_page), methods=GET),
        Route("/tasks/{task_id}", page(pages.task_page), methods=GET),
        Route("/tasks/{task_id}/requeue", page(forms.requeue_action, "requeue"), methods=POST),
        Route("/tasks/{task_id}/priority", page(forms.priority_action, "priority"), methods=POST),
        Route("/tasks/{task_id}/cancel", page(forms.cancel_action, "cancel"), methods=POST),
        Route("/tasks/{task_id}/release", page(forms.release_action, "release"), methods=POST),
        Route("/tasks/{task_id}/expire", page(forms.expire_action, "expire"), methods=POST),
        Route("/artifacts/{artifact_id}", page(pages.artifact_page), methods=GET),
        Route("/reviews", page(pages.reviews_page), methods=GET),
        Route("/reviews/{pack_id}", page(forms.review_action, "review"), methods=POST),
        Route("/missions", page(pages.missions_page), methods=GET),
        Route("/missions/{mission_id}", page(pages.mission_page), methods=GET),
        Route("/agents", page(pages.agents_page), methods=GET),
        Route("/stuck", page(pages.stuck_page), methods=GET),
        Route("/merges", page(pages.merges_page), methods=GET),
        Route("/audit", page(pages.audit_page), methods=GET),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/logout", page(logout), methods=POST),
        Route("/events", EventStream()),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        Route("/{rest:path}", page(pages.not_found)),
    ]
    app = Starlette(routes=routes)
    app.state.dashboard = dashboard
    return app
