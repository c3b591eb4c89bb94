"""`tether config show|init`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tether.cli.common import EXIT_OK
from tether.errors import ConfigError


def add_cli(sub: Any) -> None:
    config = sub.add_parser("config", help="show or create the configuration")
    config_sub = config.add_subparsers(dest="config_command", metavar="ACTION")
    show = config_sub.add_parser("show", help="the merged configuration and where it came from")
    show.set_defaults(handler=cmd_config_show)
    init = config_sub.add_parser("init", help="write a commented tether.toml")
    init.add_argument("--force", action="store_true", help="overwrite an existing file")
    init.set_defaults(handler=cmd_config_init)


def cmd_config_show(args: argparse.Namespace) -> int:
    from tether.config import load_config

    cfg = load_config(args.workspace)
    print(f"# layers: {', '.join(cfg.sources)}")
    print(json.dumps(cfg.model_dump(mode="json"), indent=2))
    return EXIT_OK


def cmd_config_init(args: argparse.Namespace) -> int:
    from tether.config import INIT_TEMPLATE

    path = Path(args.workspace) / "tether.toml"
    if path.exists() and not args.force:
        raise ConfigError(f"{path} exists; pass --force to overwrite it")
    path.write_text(INIT_TEMPLATE)
    print(f"wrote {path}")
    return EXIT_OK
