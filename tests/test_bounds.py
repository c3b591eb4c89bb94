"""The bounds of a run are one table (``tether.bounds.BOUNDS``), checked before every model
request and before every batch of tool calls; a run's ``Spend`` counts up its delegations."""

from __future__ import annotations

import asyncio

from tether import Agent, Prices, ToolOutput, tool
from tether.bounds import BOUNDS, Progress, Spend, armed, first_reached
from tether.messages import ToolResult, Usage
from tether.outcome import StopCause
from tether.providers import Reply, Scripted, call
from tether.result import RunResult
from tether.settings import AgentSettings

ran: list[str] = []


@tool
def step(n: int) -> str:
    """Take a step."""
    ran.append(f"step {n}")
    return f"stepped {n}"


def setup_function() -> None:
    ran.clear()


def spending(output_tokens: int, reply: Reply) -> Reply:
    return Reply(reply.text, reply.calls, Usage(0, output_tokens, requests=1))


def unrun_results(result: RunResult) -> list[str]:
    """The results the run's last tool message gave."""
    conv = result.conversation
    last = conv.messages[-1]
    return [p.content for p in last.parts if isinstance(p, ToolResult)]


# --- the table ---------------------------------------------------------------------------


def test_the_bounds_are_one_table_in_order_of_precedence() -> None:
    assert [(b.name, b.cause) for b in BOUNDS] == [
        ("interrupt", StopCause.INTERRUPTED),
        ("max_output_tokens", StopCause.OUTPUT_TOKEN_BUDGET),
        ("max_cost_usd", StopCause.COST_BUDGET),
        ("max_turns", StopCause.MAX_TURNS),
    ]


def test_the_first_bound_reached_names_the_stop() -> None:
    settings = AgentSettings(max_turns=2, max_output_tokens=10)
    spend = Spend(settings)
    spend.add(Usage(0, 10))
    interrupt = asyncio.Event()
    interrupt.set()
    everything = Progress(turns=2, max_turns=2, interrupt=interrupt, spend=spend)
    reached = first_reached(everything)
    assert reached is not None and reached.bound.name == "interrupt"
    without_interrupt = Progress(turns=2, max_turns=2, interrupt=None, spend=spend)
    reached = first_reached(without_interrupt)
    assert reached is not None and reached.bound.cause is StopCause.OUTPUT_TOKEN_BUDGET
    assert reached.why == "the run's output token budget is spent"


def test_a_skipped_bound_is_not_checked() -> None:
    progress = Progress(turns=3, max_turns=3, interrupt=None, spend=Spend(AgentSettings()))
    reached = first_reached(progress)
    assert reached is not None and reached.bound.name == "max_turns"
    assert first_reached(progress, skip=frozenset({"max_turns"})) is None


def test_a_childs_spend_counts_in_every_run_above_it() -> None:
    top = Spend(AgentSettings(max_output_tokens=100))
    middle = Spend(AgentSettings(), above=top)
    bottom = Spend(AgentSettings(max_output_tokens=50), above=middle)
    bottom.add(Usage(1, 40))
    middle.add(Usage(1, 55))
    assert [s.usage.output_tokens for s in bottom.chain()] == [40, 95, 95]
    assert bottom.output_tokens_left() == 5  # the top's 100 - 95, fewer than the bottom's 10
    assert middle.tokens_spent() is None
    top.add(Usage(0, 5))
    assert bottom.tokens_spent() == ("the delegating run's output token budget "
                                     "(100 tokens) is spent")


def test_a_cost_budget_is_checked_at_each_runs_own_prices() -> None:
    priced = AgentSettings(max_cost_usd=1.0, prices=Prices(output_per_mtok=1_000_000.0))
    top = Spend(priced)
    child = Spend(AgentSettings(), above=top)
    child.add(Usage(0, 1))
    assert child.cost() is None and top.cost() == 1.0
    assert child.cost_spent() == "the delegating run's cost budget ($1) is spent"


def test_a_run_reads_only_the_bounds_it_can_reach_a_budget_above_it_included() -> None:
    def names(interrupt: asyncio.Event | None, spend: Spend) -> list[str]:
        return [b.name for b in armed(interrupt, spend)]

    plain = Spend(AgentSettings())
    assert names(None, plain) == ["max_turns"]
    assert names(asyncio.Event(), plain) == ["interrupt", "max_turns"]
    top = Spend(AgentSettings(max_output_tokens=100, max_cost_usd=1.0,
                              prices=Prices(output_per_mtok=1.0)))
    child = Spend(AgentSettings(), above=Spend(AgentSettings(), above=top))
    assert names(None, child) == ["max_output_tokens", "max_cost_usd", "max_turns"]
    # Without a budget anywhere on the chain, a budget is never spent, however much was.
    plain.add(Usage(10**9, 10**9))
    assert plain.tokens_spent() is None and plain.cost_spent() is None
    assert plain.output_tokens_left() is None
    # A budget above still stops the child the moment the family has spent it.
    child.add(Usage(0, 100))
    reached = first_reached(Progress(0, 10, None, child), bounds=armed(None, child))
    assert reached is not None and reached.bound.cause is StopCause.OUTPUT_TOKEN_BUDGET


# --- checked before every model request --------------------------------------------------


async def test_an_interrupt_set_by_a_tool_stops_the_run_before_the_next_request() -> None:
    interrupt = asyncio.Event()

    @tool
    def stop_here() -> str:
        """Stop."""
        interrupt.set()
        return "stopping"

    model = Scripted([call("stop_here"), "never asked"])
    result = await Agent(model, tools=[stop_here]).run("go", interrupt=interrupt)
    assert result.stop_cause == "interrupted"
    assert len(model.requests) == 1


async def test_a_tools_usage_that_spends_the_cost_budget_stops_the_next_request() -> None:
    @tool
    def pricey() -> ToolOutput:
        """Spend."""
        return ToolOutput("done", usage=Usage(0, 2))

    model = Scripted([spending(0, call("pricey")), "never asked"])
    agent = Agent(model, tools=[pricey], max_cost_usd=2.0,
                  prices=Prices(output_per_mtok=1_000_000.0))
    result = await agent.run("go")
    assert result.stop_cause == "cost_budget"
    assert len(model.requests) == 1 and result.cost_usd == 2.0


async def test_max_turns_is_checked_before_the_request_after_a_turn_of_calls() -> None:
    model = Scripted([call("step", n=1), call("step", n=2), "never asked"])
    result = await Agent(model, tools=[step], max_turns=2).run("go")
    # Turn 2's calls are the last turn's: no model would read their results.
    assert result.stop_cause == "max_turns"
    assert ran == ["step 1"] and len(model.requests) == 2


# --- checked before every batch of calls -------------------------------------------------


async def test_a_response_that_spends_the_token_budget_has_its_calls_answered_not_run() -> None:
    model = Scripted([spending(10, call("step", n=1)), "never asked"])
    result = await Agent(model, tools=[step], max_output_tokens=10).run("go")
    assert result.stop_cause == "output_token_budget"
    assert ran == []
    assert unrun_results(result) == [
        "Not run: the run's output token budget is spent."]


async def test_a_response_that_spends_the_cost_budget_has_its_calls_answered_not_run() -> None:
    model = Scripted([spending(3, call("step", n=1)), "never asked"])
    agent = Agent(model, tools=[step], max_cost_usd=3.0,
                  prices=Prices(output_per_mtok=1_000_000.0))
    result = await agent.run("go")
    assert result.stop_cause == "cost_budget" and ran == []
    assert unrun_results(result) == [
        "Not run: the run's cost budget ($3) is spent."]


async def test_calls_of_the_last_turn_are_answered_not_run() -> None:
    model = Scripted([call("step", n=1)])
    result = await Agent(model, tools=[step], max_turns=1).run("go")
    assert result.stop_cause == "max_turns" and ran == []
    assert unrun_results(result) == ["Not run: the run reached max_turns (1)."]


async def test_an_interrupt_set_while_the_model_answered_leaves_its_calls_unrun() -> None:
    interrupt = asyncio.Event()

    def answer_then_interrupt(request: object) -> Reply:
        interrupt.set()  # the answer is complete; the interrupt comes before its calls run
        return call("step", n=1)

    model = Scripted([answer_then_interrupt])
    result = await Agent(model, tools=[step]).run("go", interrupt=interrupt)
    assert ran == []
    assert result.stop_cause == "interrupted"
