"""Starting a workflow (DESIGN section 12): its definition, filled from the inputs, becomes a mission.

One task per step, each step's `depends_on` its dependencies, the topological levels its phases (level 0: the
steps that wait for nothing), the objectives, instructions and criteria filled from the inputs. Each task
keeps its step (workflow, version, outputs, gate) so that the prover checks the outputs and the review
applies the gate of the version the mission started with, whatever the file says later.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from server.core import results as r
from server.core.missions import plan as missions
from server.core.models import Actor, Limits, check_text
from server.core.service import Core
from server.core.text import one_line
from server.core.workflows.definitions import Catalog, Workflow, WorkflowStep, fill, levels
from server.db import missions as q
from server.db.records import Step, StepOutput
from server.errors import invalid

MAX_INPUTS = 20


def list_workflows(core: Core) -> r.WorkflowList:
    return list_workflows_of(core.workflows.catalog())


def list_workflows_of(catalog: Catalog) -> r.WorkflowList:
    return r.WorkflowList(
        workflows=[summary(workflow) for workflow in catalog.workflows.values()],
        refused=[str(problem) for problem in catalog.problems[:20]],
    )


async def steps_of(core: Core, task_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The workflow step each of these tasks carries out, for those that are one."""
    async with core.db.read() as conn:
        return await q.steps_of(conn, task_ids)


def summary(workflow: Workflow) -> r.WorkflowSummary:
    return r.WorkflowSummary(
        name=workflow.name,
        version=workflow.version,
        summary=workflow.summary,
        inputs=list(workflow.inputs),
        steps=[step.id for step in workflow.steps],
    )


def check_inputs(workflow: Workflow, inputs: object) -> dict[str, str]:
    """The input values: every required one given, none unknown, each plain text; defaults for the rest."""
    if inputs is None:
        inputs = {}
    if not isinstance(inputs, Mapping):
        raise invalid("inputs must be an object of input names to text.", f"Send e.g. {_example(workflow)}.")
    if len(inputs) > MAX_INPUTS:
        raise invalid(f"{len(inputs)} inputs; the limit is {MAX_INPUTS}.", "Send only the workflow's inputs.")
    declared = {item.name: item for item in workflow.inputs}
    unknown = sorted(str(name)[:64] for name in inputs if name not in declared)
    if unknown:
        raise invalid(
            f"Workflow {workflow.name!r} has no input(s) {', '.join(unknown)}.",
            f"Its inputs are: {', '.join(declared) or 'none'}.",
        )
    missing = [name for name, item in declared.items() if item.required and name not in inputs]
    if missing:
        raise invalid(
            f"Workflow {workflow.name!r} needs the input(s) {', '.join(missing)}.", f"Send e.g. {_example(workflow)}."
        )
    values: dict[str, str] = {}
    for name, item in declared.items():
        if name in inputs:
            values[name] = check_text(inputs[name], f"inputs.{name}", Limits.OBJECTIVE, required=item.required)
        else:
            values[name] = item.default or ""
    return values


def _example(workflow: Workflow) -> str:
    wanted = [item.name for item in workflow.inputs if item.required] or [item.name for item in workflow.inputs[:1]]
    return "{" + ", ".join(f'"{name}": "..."' for name in wanted) + "}"


def step_record(workflow: Workflow, step: WorkflowStep, max_rounds: int) -> dict[str, Any]:
    """What a task keeps of its step: enough for the prover (outputs) and the review (gate), fixed at start."""
    record = Step(
        workflow=workflow.name,
        version=workflow.version,
        step=step.id,
        depends_on=step.depends_on,
        outputs=tuple(
            StepOutput.model_validate(
                {
                    "name": output.name,
                    "type": output.type,
                    "required": output.required,
                    **({"schema": output.schema_} if output.schema_ is not None else {}),
                }
            )
            for output in step.outputs
        ),
        review=step.gate.review,
        max_rounds=max_rounds if step.gate.max_rounds is None else step.gate.max_rounds,
    )
    return record.stored()


def plan(
    workflow: Workflow,
    values: Mapping[str, str],
    *,
    target_repo: str,
    target_ref: str,
    target_path: str,
    priority: str,
) -> list[dict[str, Any]]:
    """The mission's phases: the steps by topological level, each a task filled from the inputs."""
    level = levels(workflow.steps)
    phases: list[dict[str, Any]] = [{"name": "", "tasks": []} for _ in range(max(level.values()) + 1)]
    for step in workflow.steps:
        instructions = fill(step.instructions, values)
        listed = ", ".join(f"{o.name} ({o.type})" for o in step.outputs if o.required)
        if listed:
            instructions += f"\n\nReport as artifacts titled exactly: {listed}."
        phases[level[step.id]]["tasks"].append(
            {
                "key": step.id,
                "objective": fill(step.objective, values),
                "operation": step.operation,
                "target_repo": target_repo,
                "target_ref": target_ref,
                "target_path": target_path if step.target_path is None else step.target_path,
                "priority": step.priority or priority,
                "time_budget_seconds": step.time_budget_seconds,
                "acceptance_criteria": [fill(c, values) for c in step.acceptance_criteria],
                "context_summary": instructions.strip(),
                "depends_on": list(step.depends_on),
                **({"doctrine": list(step.doctrine)} if step.doctrine else {}),
                **({"touches": list(step.touches)} if step.touches is not None else {}),
            }
        )
    for phase in phases:
        phase["name"] = ", ".join(task["key"] for task in phase["tasks"])[: Limits.TITLE]
    return phases


async def start_workflow(
    core: Core,
    actor: Actor,
    name: str,
    inputs: object,
    *,
    target_repo: str,
    target_ref: str = "main",
    target_path: str = "",
    priority: str = "P2",
    idempotency_key: str | None = None,
) -> r.WorkflowStarted:
    workflow = core.workflows.catalog().get(name)
    values = check_inputs(workflow, inputs)
    phases = plan(
        workflow, values, target_repo=target_repo, target_ref=target_ref, target_path=target_path, priority=priority
    )
    max_rounds = core.settings.max_review_rounds
    steps = {step.id: step_record(workflow, step, max_rounds) for step in workflow.steps}
    first = next((value for value in values.values() if value.strip()), "")
    title = f"{workflow.name}: {one_line(first, 120)}" if first else workflow.name
    goal = workflow.summary + "".join(f"\n{key}: {value}" for key, value in values.items() if value)
    created = await missions.create_mission(
        core,
        actor,
        title=title[: Limits.TITLE],
        goal=goal[: Limits.OBJECTIVE],
        phases=phases,
        idempotency_key=idempotency_key,
        workflow={"name": workflow.name, "version": workflow.version, "inputs": values},
        steps=steps,
    )
    return r.WorkflowStarted(
        mission_id=created.mission_id,
        status=created.status,
        tasks=created.tasks,
        duplicate=created.duplicate,
        workflow=workflow.name,
        version=workflow.version,
    )
