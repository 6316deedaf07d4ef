"""Pages. The fabric heatmap arrives with the live-dashboard work; until then the index says how to look."""

from django.http import HttpRequest, HttpResponse


def index(request: HttpRequest) -> HttpResponse:
    return HttpResponse(
        "fabricmon is running. Live data: `python manage.py fabric_status`. Admin: /admin/\n",
        content_type="text/plain",
    )
