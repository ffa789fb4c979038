"""The ``contextwarden`` command line (typer + rich): a thin layer over the library.

One module per command group. Errors are one line on stderr (``error: ...``) with exit code 1
for a failure and 2 for a usage mistake; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup, TyperOption

from .._version import __version__
from ..exceptions import ContextWardenError
from . import _common
from .bench import bench_app
from .bench_proxy import bench_proxy_command
from .config import config_app
from .demo import demo_command
from .doctor import doctor_command
from .eval import eval_command
from .replay import replay_command
from .serve import serve_command
from .sessions import inspect_command, sessions_app
from .transcript import compact_command, count_command

__all__ = ["app", "main"]

# Typer vendors click from 0.2x on (typer._click); take the exception classes from where its own come from.
_cx: Any = sys.modules[typer.BadParameter.__module__]


_option_type = TyperOption.display_type_rich


def _flag_without_type(self: TyperOption, ctx: Any) -> str | None:
    """No value type beside a flag in the help (`--json`, not `--json <bool>`): a flag takes no value."""
    return None if self.is_flag else _option_type(self, ctx)


# Typer's help shows the type of every option, flags included; a flag's type misleads a reader
# into passing a value. Only the help's display changes.
TyperOption.display_type_rich = _flag_without_type  # type: ignore[method-assign]


class _Group(TyperGroup):
    """The root group: turns every error into one readable line and an exit code."""

    def main(  # type: ignore[override]
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        argv = [str(a) for a in (sys.argv[1:] if args is None else list(args))]
        debug = "--debug" in argv
        try:
            rv = super().main(args=args, prog_name=prog_name, complete_var=complete_var, standalone_mode=False, **extra)
        except _common.CLIError as exc:
            if debug:
                raise
            typer.echo(f"error: {self._for_cli(_one_line(exc), argv)}", err=True)
            return self._exit(exc.exit_code, standalone_mode)
        except _cx.UsageError as exc:
            if type(exc).__name__ == "NoArgsIsHelpError" and exc.ctx is not None:
                exc.show()  # prints the help
                return self._exit(2, standalone_mode)
            hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            typer.echo(f"error: {_one_line_text(exc.format_message())}{hint}", err=True)
            return self._exit(int(exc.exit_code), standalone_mode)
        except _cx.ClickException as exc:
            typer.echo(f"error: {_one_line_text(exc.format_message())}", err=True)
            return self._exit(int(exc.exit_code), standalone_mode)
        except typer.Abort:
            typer.echo("error: aborted.", err=True)
            return self._exit(1, standalone_mode)
        except (ContextWardenError, OSError, ImportError) as exc:
            if debug:
                raise
            typer.echo(f"error: {self._for_cli(_one_line(exc), argv)}", err=True)
            return self._exit(_common.exit_code_for(exc), standalone_mode)
        except Exception as exc:
            if debug:
                raise
            typer.echo(
                f"error: unexpected {type(exc).__name__}: {_one_line(exc)} (run with --debug for the traceback)",
                err=True,
            )
            return self._exit(1, standalone_mode)
        code = rv if isinstance(rv, int) else 0
        return self._exit(code, standalone_mode)

    def _leaf(self, argv: list[str]) -> Any:
        """The command that ``argv`` runs (this group when it names none)."""
        command: Any = self
        for token in argv:
            commands = getattr(command, "commands", None)
            if commands is not None and token in commands:
                command = commands[token]
        return command

    def _for_cli(self, message: str, argv: list[str]) -> str:
        """``message`` with the library's parameter names replaced by the command's flags.

        The library words its errors for Python callers (`` `window=` ``, `` `session_id` ``); on the
        command line the same value is a flag (``--window``) or an argument (``SESSION_ID``).
        """
        flags = dict(_LIBRARY_ONLY)
        own = {o for param in getattr(self._leaf(argv), "params", ()) for o in getattr(param, "opts", ())}
        window = " or ".join(f"`{o}`" for o in ("--budget", "--window") if o in own)
        message = message.replace(
            _WINDOW_ADVICE,
            f"Raise {window or _LIBRARY_ONLY['window']}, lower {_LIBRARY_ONLY['reserved_output']}",
        )
        for param in getattr(self._leaf(argv), "params", ()):
            if param.name not in _LIBRARY_NAMES:
                continue
            if param.param_type_name == "option":
                long = [o for o in param.opts if o.startswith("--")]
                flags[param.name] = f"`{max(long, key=len) if long else param.opts[0]}`"
            else:
                flags[param.name] = f"the {param.metavar or param.name.upper()} argument"
        return _PARAM_RE.sub(lambda m: flags.get(m.group(1), m.group(0)), message)

    @staticmethod
    def _exit(code: int, standalone_mode: bool) -> int:
        if standalone_mode:
            sys.exit(code)
        return code


_LIBRARY_NAMES = frozenset(
    {"window", "model", "budget", "session_id", "format", "store", "tenant", "reserved_output", "base_url"}
)
"""Library parameter names that a command's flag or argument of the same name stands for."""
_LIBRARY_ONLY = {
    "window": "`max_context_tokens` in `[agent_context]` of the config file",
    "max_output": '`max_output` in a `[models."NAME"]` table of the config file',
    "reserved_output": "`reserved_tokens` in `[agent_context]` of the config file",
    "register_model(ModelInfo(...))": 'a `[models."NAME"]` table (`context_length`, `max_output`) in the config file',
    "base_url": "`upstream_url` in `[service]` of the config file (or `--upstream`)",
}
"""What stands for a library parameter on the command line when the command has no flag for it."""
_WINDOW_ADVICE = "Raise the window, lower the reserved output"
"""The library's advice for a view whose protected part does not fit, in its own terms."""
_PARAM_RE = re.compile(r"`([a-z_]+(?:\(ModelInfo\(\.\.\.\)\))?)=?`")


def _one_line_text(text: str) -> str:
    return " ".join(text.split())


def _one_line(exc: BaseException) -> str:
    return _one_line_text(str(exc)) or type(exc).__name__


app = typer.Typer(
    name="contextwarden",
    cls=_Group,
    help="Keep long-running LLM agents inside their context window without forgetting.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"contextwarden {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="Config file (TOML or YAML); default: see `config show`.", metavar="PATH"),
    ] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks instead of one-line errors.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Keep long-running LLM agents inside their context window without forgetting."""
    st = _common.state(ctx)
    st.debug = debug
    st.config = config


app.command("demo")(demo_command)
app.command("compact")(compact_command)
app.command("count")(count_command)
app.command("inspect")(inspect_command)
app.command("eval")(eval_command)
app.command("replay")(replay_command)
app.add_typer(sessions_app, name="sessions")
app.add_typer(config_app, name="config")
app.add_typer(bench_app, name="bench")
app.command("serve")(serve_command)
app.command("doctor")(doctor_command)
bench_app.command("proxy")(bench_proxy_command)


def main() -> None:
    """Entry point of the ``contextwarden`` script and ``python -m contextwarden``."""
    app()
