"""jct://workflows/{name}: a workflow definition as Markdown, for a model about to start or work one."""

from __future__ import annotations

from server.core.workflows.definitions import Workflow
from server.markdown import bullets, line


def workflow_page(workflow: Workflow) -> str:
    lines = [
        f"# Workflow {line(workflow.name, 64)}",
        "",
        line(workflow.summary, 200),
        "",
        f"Version {workflow.version} ({'shipped with JCT' if workflow.shipped else 'from JCT_WORKFLOWS_DIR'}). "
        f"Start it with jct_start_workflow(name={workflow.name!r}, inputs={{...}}, target_repo=...).",
        "",
        "## Inputs",
    ]
    inputs = [
        f"{i.name}{' (required)' if i.required else ''}"
        + (f": {i.description}" if i.description else "")
        + (f" (default: {i.default})" if i.default is not None else "")
        for i in workflow.inputs
    ]
    lines += bullets(inputs, 400) if inputs else ["None."]
    lines += ["", "## Steps"]
    for step in workflow.steps:
        gate = step.gate
        waits = ", ".join(step.depends_on) or "nothing"
        lines += [
            "",
            f"### {line(step.id, 64)} ({step.operation})",
            "",
            f"Objective: {line(step.objective, 300)}",
            f"Waits for: {waits}. Review: {gate.review}"
            + (
                f", {gate.max_rounds} review(s) may ask for changes, the last failing the task"
                if gate.max_rounds is not None
                else ""
            )
            + ".",
        ]
        if step.instructions:
            lines += ["", f"Instructions: {line(step.instructions, 2000)}"]
        outputs = [
            f"{o.name} ({o.type}{'' if o.required else ', optional'})" + (f": {o.description}" if o.description else "")
            for o in step.outputs
        ]
        if outputs:
            lines += ["", "Outputs (artifacts titled exactly so):", *bullets(outputs, 400)]
        if step.acceptance_criteria:
            lines += ["", "Acceptance criteria:", *bullets(step.acceptance_criteria, 400)]
    return "\n".join(lines) + "\n"
