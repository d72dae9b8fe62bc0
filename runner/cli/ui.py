"""`wfrun ui`: serve the read-only web view of this project on 127.0.0.1."""

from __future__ import annotations

import click

from runner.errors import InputError, OperationFailed
from runner.host.runtime.launches import environment_secrets

from .app import cli
from .context import Context
from .runs import workspace


@cli.command("ui")
@click.option("--port", "port_text", default="0", metavar="N",
              help="Port to listen on (default: a free one).")
@click.option("--host", "host", metavar="ADDRESS",
              help="Listen on this address instead of 127.0.0.1 (needs a token).")
@click.option("--token", envvar="WFRUN_UI_TOKEN", metavar="TOKEN",
              help="Require this token (made up for you when --host is not loopback).")
@click.option("--open", "open_browser", is_flag=True, help="Open the page in a browser.")
@click.pass_obj
def ui_cmd(ctx: Context, port_text: str, host: str | None, token: str | None,
           open_browser: bool) -> None:
    """Serve a read-only web view: runs, live run graphs, the queue, workflows and
    controller resources. Ctrl-C stops it."""
    if not port_text.isdigit() or int(port_text) > 65535:
        raise InputError(f"--port must be a port number from 0 to 65535 (0: a free one), "
                         f"got {port_text!r}")
    port = int(port_text)
    try:
        from runner.ui.data import Site
        from runner.ui.server import check_bind, serve
    except ImportError as exc:  # a dependency of every install, removed or broken since
        raise OperationFailed(f"wfrun ui needs {exc.name or 'starlette and uvicorn'}, which "
                              "is not installed: pip install --upgrade --force-reinstall "
                              "wfrun") from None
    config = check_bind(host, token)
    site = Site(workspace(ctx), user_dir=ctx.user_dir, secrets=environment_secrets())

    def ready(url: str) -> None:
        click.echo(f"wfrun ui: {url}")
        click.echo("read-only; Ctrl-C stops it", err=True)
        if open_browser:
            import webbrowser

            webbrowser.open(url)

    serve(site, config, port, on_ready=ready)
