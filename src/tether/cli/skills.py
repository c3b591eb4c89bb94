"""`tether skills`: the skills the configuration names (``[skills] paths``, the user's
``~/.config/tether/skills``), each with its description, folder and whether it is the
user's words (trusted) or outside text. Malformed skills are named on stderr, skipped."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from tether.cli.common import EXIT_OK, error


def add_cli(sub: Any) -> None:
    skills = sub.add_parser("skills", help="list skills: name, description, folder, trust")
    skills.add_argument("--json", action="store_true")
    skills.set_defaults(handler=cmd_skills)


def cmd_skills(args: argparse.Namespace) -> int:
    from tether.config.layers import load_config
    from tether.skills import SkillFolder, Skills

    cfg = load_config(args.workspace)
    found = Skills(SkillFolder(Path(path), trusted) for path, trusted in cfg.skill_folders)
    for warning in found.warnings:
        error(warning)
    rows = [{"name": s.name, "description": s.description, "folder": str(s.folder),
             "trusted": s.trusted} for s in found.skills]
    if args.json:
        from tether.display import json_dumps

        print(json_dumps(rows, indent=2))
        return EXIT_OK
    from rich.table import Table

    from tether.cli.render import print_table
    from tether.display import inline, plain

    table = Table(title="skills")
    for col in ("name", "description", "folder", "trust"):
        table.add_column(col, overflow="fold")
    for r in rows:
        # A skill's text may be another's (an untrusted folder): cells hold it as plain text.
        table.add_row(plain(inline(r["name"])), plain(inline(r["description"])),
                      plain(inline(r["folder"])),
                      "trusted (yours)" if r["trusted"] else "untrusted (outside text)")
    print_table(table)
    return EXIT_OK
