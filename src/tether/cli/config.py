"""`tether config show|init`; `tether config` alone lists the actions (and exits 1)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tether.cli.actions import add_actions
from tether.cli.common import EXIT_OK
from tether.errors import ConfigError


def add_cli(sub: Any) -> None:
    config = sub.add_parser("config", help="show or create the configuration")
    config_sub = add_actions(config, "config_command")
    show = config_sub.add_parser(
        "show", help="the merged configuration, each key with where it came from")
    show.add_argument("--json", action="store_true",
                      help="as JSON: the merged configuration and each key's origin")
    show.add_argument("--local", action="store_true",
                      help="as a --local command sees it: what --local sets is marked "
                           "# --local")
    show.set_defaults(handler=cmd_config_show)
    init = config_sub.add_parser("init", help="write a commented tether.toml")
    init.add_argument("--force", action="store_true", help="overwrite an existing file")
    init.set_defaults(handler=cmd_config_init)


def settings(workspace: str, local: dict[str, Any] | None = None,
             ) -> tuple[Any, list[tuple[str, Any, str]]]:
    """The merged configuration and its keys as ``(dotted key, value, origin)``: the origin
    is the layer that set it (a file's path, ``environment``, ``defaults``, ``--local`` for
    ``local``, the layer ``--local`` adds). A list (``mcp``, ``tools.enabled``) is one
    value: a layer replaces it whole."""
    from tether.config.layers import config_layers, load_config, origins

    cfg = load_config(workspace, local)
    where = {key: "--local" if source == "flags" else source
             for key, source in origins(config_layers(workspace, local)).items()}
    rows: list[tuple[str, Any, str]] = []

    def origin(key: str) -> str:
        while key:
            if key in where:
                return where[key]
            key = key.rpartition(".")[0]
        return "defaults"

    def walk(prefix: str, table: dict[str, Any]) -> None:
        for key, value in table.items():
            path = f"{prefix}{key}"
            if isinstance(value, dict) and value:
                walk(path + ".", value)
            else:
                rows.append((path, value, origin(path)))

    walk("", cfg.model_dump(mode="json", exclude={"sources", "own_files"}))
    return cfg, rows


def cmd_config_show(args: argparse.Namespace) -> int:
    from tether.display import literal

    local = said = None
    if args.local:
        from tether.cli.local import local_changes, local_layer

        local = local_layer(args)
        said = local_changes(args, local)
    cfg, rows = settings(args.workspace, local)
    sources = ["--local" if s == "flags" else s for s in cfg.sources]
    if args.json:
        print(json.dumps({"layers": sources,
                          "config": cfg.model_dump(mode="json", exclude={"own_files"}),
                          "origins": {key: source for key, _, source in rows}}, indent=2))
        return EXIT_OK
    # Values and paths come from the user's files and environment: printed literally.
    print(literal(f"# layers, later wins: {', '.join(sources)}"))
    for line in said or ():
        print(literal(f"# {line}"))
    lines = [(f"{key} = {json.dumps(value, ensure_ascii=False)}", source)
             for key, value, source in rows]
    width = min(60, max(len(text) for text, _ in lines))
    for text, source in lines:
        print(literal(f"{text:<{width}}  # {source}"))
    return EXIT_OK


def cmd_config_init(args: argparse.Namespace) -> int:
    from tether.config.template import INIT_TEMPLATE

    path = Path(args.workspace) / "tether.toml"
    if path.exists() and not args.force:
        raise ConfigError(f"{path} exists; pass --force to overwrite it")
    path.write_text(INIT_TEMPLATE)
    print(f"wrote {path}")
    return EXIT_OK
