"""A parent's budgets cover its sub-agents: the child's usage counts against them as it
happens, the child stops when the family has spent them, and the parent's result says what
the whole family spent."""

from __future__ import annotations

import asyncio

from tether import Agent, Prices, SubagentProfile, tool
from tether import events as ev
from tether.messages import Usage
from tether.providers import Scripted, call
from tether.providers.scripted import Reply

ran: list[str] = []

# One dollar per output token: a budget in dollars reads as a budget in output tokens.
DOLLAR_A_TOKEN = Prices(input_per_mtok=0.0, output_per_mtok=1_000_000.0)


@tool
def look(n: int) -> str:
    """Look something up."""
    ran.append(f"look {n}")
    return f"looked {n}"


def spending(output_tokens: int, reply: Reply | str) -> Reply:
    """``reply`` (a text or a call), reported to have cost ``output_tokens``."""
    base = Reply(text=reply) if isinstance(reply, str) else reply
    return Reply(base.text, base.calls, Usage(0, output_tokens, requests=1))


def researcher(provider: str = "child", tools: tuple[str, ...] = ("look",)) -> SubagentProfile:
    return SubagentProfile("research", "Research a question.", tools=list(tools),
                           max_turns=10, provider=provider)


def subagent_finished(events: list[ev.Event]) -> list[ev.SubagentFinished]:
    return [e for e in events if isinstance(e, ev.SubagentFinished)]


def setup_function() -> None:
    ran.clear()


async def test_a_parent_cost_budget_stops_its_child_as_the_child_runs() -> None:
    child = Scripted([spending(3, call("look", n=1)), spending(2, call("look", n=2)),
                      spending(1, call("look", n=3)), "found it"])
    parent = Scripted([spending(1, call("research", task="find it")), "never asked"])
    agent = Agent(parent, tools=[look], subagents=[researcher()], providers={"child": child},
                  max_cost_usd=5.0, prices=DOLLAR_A_TOKEN)

    result = await agent.run("research it")

    # 1 (parent) + 3 + 2 (child) = 6 >= 5 after the child's second turn: its second call
    # is not run, and it asks its model no more.
    assert ran == ["look 1"]
    assert len(child.requests) == 2 and child.remaining == 2
    [finished] = subagent_finished(result.events)
    assert finished.stop_cause == "cost_budget"
    # The parent stops too, before asking its model again.
    assert result.stop_cause == "cost_budget"
    assert len(parent.requests) == 1


async def test_a_parent_output_token_budget_stops_its_child_as_the_child_runs() -> None:
    child = Scripted([spending(4, call("look", n=1)), spending(5, call("look", n=2)), "done"])
    parent = Scripted([spending(2, call("research", task="find it")), "never asked"])
    agent = Agent(parent, tools=[look], subagents=[researcher()], providers={"child": child},
                  max_output_tokens=10)

    result = await agent.run("research it")

    assert ran == ["look 1"]
    assert len(child.requests) == 2
    [finished] = subagent_finished(result.events)
    assert finished.stop_cause == "output_token_budget"
    assert result.stop_cause == "output_token_budget"
    assert len(parent.requests) == 1


async def test_a_child_asks_its_model_for_no_more_tokens_than_the_parent_has_left() -> None:
    child = Scripted([spending(3, call("look", n=1)), spending(1, "found it")])
    parent = Scripted([spending(2, call("research", task="find it")), "done"])
    agent = Agent(parent, tools=[look], subagents=[researcher()], providers={"child": child},
                  max_output_tokens=10)

    result = await agent.run("research it")

    assert [r.max_output_tokens for r in child.requests] == [8, 5]
    assert parent.requests[1].max_output_tokens == 4
    assert result.stop_cause == "completed"


async def test_a_child_whose_parent_spent_its_budget_already_asks_its_model_nothing() -> None:
    child = Scripted(["an answer nobody pays for"])
    parent = Scripted([spending(5, call("research", task="find it")), "never asked"])
    agent = Agent(parent, tools=[look], subagents=[researcher()], providers={"child": child},
                  max_cost_usd=5.0, prices=DOLLAR_A_TOKEN)

    result = await agent.run("research it")

    # The parent's turn spent the budget: its calls are not run (a bound is checked before
    # every batch of calls), so no child starts at all.
    assert child.requests == []
    assert result.stop_cause == "cost_budget"
    assert [r.status for r in result.tool_calls] == []


async def test_the_parents_result_accounts_for_its_childs_usage_and_cost() -> None:
    child = Scripted([spending(3, call("look", n=1)), spending(4, "found it")])
    parent = Scripted([spending(1, call("research", task="find it")), spending(2, "done")])
    agent = Agent(parent, tools=[look], subagents=[researcher()], providers={"child": child},
                  prices=DOLLAR_A_TOKEN)

    result = await agent.run("research it")

    assert result.stop_cause == "completed"
    assert result.usage.output_tokens == 1 + 3 + 4 + 2
    assert result.usage.requests == 4
    assert result.cost_usd == 10.0
    [finished] = subagent_finished(result.events)
    assert finished.usage.output_tokens == 7  # the child's own, for its event


async def test_the_child_usage_is_counted_once_in_the_parent() -> None:
    child = Scripted([spending(3, "found it")])
    parent = Scripted([spending(1, call("research", task="find it")), spending(1, "done")])
    agent = Agent(parent, subagents=[researcher(tools=())], providers={"child": child})

    result = await agent.run("research it")

    assert result.usage.output_tokens == 5
    totals = [e.total.output_tokens for e in result.events
              if isinstance(e, ev.UsageUpdated) and not e.path]
    assert totals == [1, 5]  # the parent's second turn sees the child's 3 already counted


async def test_a_grandparents_budget_stops_a_grandchild() -> None:
    grandchild = Scripted([spending(2, call("look", n=1)), spending(3, call("look", n=2)),
                           "deep answer"])
    child = Scripted([spending(1, call("dig", task="dig deeper")), "child answer"])
    parent = Scripted([spending(1, call("research", task="find it")), "parent answer"])
    dig = SubagentProfile("dig", "Dig deeper.", tools=["look"], max_turns=10,
                          provider="grandchild")
    research = SubagentProfile("research", "Research.", tools=["dig"], max_turns=10,
                               provider="child")
    agent = Agent(parent, tools=[look], subagents=[research, dig],
                  providers={"child": child, "grandchild": grandchild},
                  max_output_tokens=7)

    result = await agent.run("research it")

    # 1 + 1 + 2 + 3 = 7: the grandchild's second call is not run.
    assert ran == ["look 1"]
    stops = {e.profile: e.stop_cause for e in subagent_finished(result.events)}
    assert stops == {"dig": "output_token_budget", "research": "output_token_budget"}
    assert result.stop_cause == "output_token_budget"
    assert result.usage.output_tokens == 7


async def test_children_side_by_side_share_their_parents_budget() -> None:
    # Two delegations in one turn; each child alone would stay within the budget, the two
    # together cannot. Each child's first call waits until both children have asked their
    # model once, so both first turns are counted before either bound is checked again.
    both_asked = asyncio.Event()
    asked: list[str] = []

    @tool
    async def wait_for_both(n: int) -> str:
        """Wait."""
        asked.append(str(n))
        if len(asked) == 2:
            both_asked.set()
        await both_asked.wait()
        return "waited"

    a = Scripted([spending(4, call("wait_for_both", n=1)), spending(4, call("wait_for_both", n=1)),
                  "a's answer"])
    b = Scripted([spending(4, call("wait_for_both", n=2)), spending(4, call("wait_for_both", n=2)),
                  "b's answer"])
    profiles = [
        SubagentProfile("ask_a", "A.", tools=["wait_for_both"], max_turns=10, provider="a"),
        SubagentProfile("ask_b", "B.", tools=["wait_for_both"], max_turns=10, provider="b"),
    ]
    parent = Scripted([
        Reply(calls=(*call("ask_a", task="x", id="1").calls,
                     *call("ask_b", task="y", id="2").calls), usage=Usage(0, 1, requests=1)),
        "never asked"])
    agent = Agent(parent, tools=[wait_for_both], subagents=profiles,
                  providers={"a": a, "b": b}, max_output_tokens=12)

    result = await agent.run("ask both")

    # 1 + 4 + 4 = 9 after both first turns; both calls run; then 9 + 4 >= 12 stops
    # whichever child answers next, and the other before its calls or its next request.
    assert sorted(asked) == ["1", "2"]
    assert {e.stop_cause for e in subagent_finished(result.events)} == {"output_token_budget"}
    assert result.stop_cause == "output_token_budget"
    assert result.usage.output_tokens is not None
    assert result.usage.output_tokens <= 1 + 4 + 4 + 4 + 4
    assert a.remaining >= 1 and b.remaining >= 1  # neither child got to answer
    assert len(parent.requests) == 1
