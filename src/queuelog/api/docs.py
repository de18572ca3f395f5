"""/docs served from the package's own copy of Swagger UI: it works with no internet."""

from __future__ import annotations

from pathlib import Path

import swagger_ui_bundle
from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse

from queuelog.errors import NotFound

ASSETS = "/docs/assets"
# Only what the /docs page loads: the bundle's demo page (which fetches a pet store's
# description from the internet), its OAuth redirect and source maps are not served.
SERVED = ("swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png")
_FOLDER = Path(swagger_ui_bundle.swagger_ui_path)
_FRAMING = {"X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff"}


def mount_docs(app: FastAPI) -> None:
    # HEAD as GET, without the body, as link checkers and uptime probes ask.
    @app.api_route(ASSETS + "/{asset}", methods=["GET", "HEAD"], include_in_schema=False)
    def docs_asset(asset: str) -> FileResponse:
        if asset not in SERVED:
            raise NotFound("No such file")
        return FileResponse(_FOLDER / asset, headers=_FRAMING)

    @app.api_route("/docs", methods=["GET", "HEAD"], include_in_schema=False)
    def docs() -> HTMLResponse:
        page = get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="queuelog API",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon-32x32.png",
        )
        page.headers.update(_FRAMING)
        return page
