"""The runnable examples in the docs run (those driven by the scripted model)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def runnable_blocks() -> list[tuple[str, int, str]]:
    out = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for n, match in enumerate(BLOCK.finditer(page.read_text())):
            code = match.group(1)
            if "Scripted(" in code and "asyncio.run(" in code:
                out.append((page.name, n, code))
    return out


@pytest.mark.parametrize(("page", "n", "code"), runnable_blocks(),
                         ids=[f"{p}#{n}" for p, n, _ in runnable_blocks()])
def test_doc_example_runs(page: str, n: int, code: str) -> None:
    exec(compile(code, f"{page}#{n}", "exec"), {"__name__": f"doc_{n}"})


def test_the_profile_table_in_the_providers_doc_matches_the_profiles() -> None:
    from tether.providers.profiles import PROFILES

    text = (ROOT / "docs" / "providers.md").read_text()
    for name, profile in PROFILES.items():
        row = next(line for line in text.splitlines() if line.startswith(f"| `{name}` |"))
        cells = [c.strip() for c in row.strip("|").split("|")][1:]
        expected = [profile.supports_tool_choice_required, profile.supports_named_tool_choice,
                    profile.supports_parallel_calls, profile.supports_stream_usage,
                    profile.supports_json_schema_output]
        assert [c.startswith("yes") for c in cells] == expected, name
