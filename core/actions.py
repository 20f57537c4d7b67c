"""The environment's actions: names and argument names follow the original benchmark so logs compare."""
from __future__ import annotations

import json

from pydantic import BaseModel


class ActionSpec(BaseModel):
    name: str
    description: str
    args: dict[str, str]  # argument name -> what to give
    uses_llm: bool = False
    interactive_only: bool = False
    optional: list[str] = []  # arguments that may be left out (they have a default)

    def usage(self) -> str:
        example = {arg: f"[{hint}]" for arg, hint in self.args.items()}
        return f"{self.name} with Action Input {json.dumps(example, indent=4)}"


def _spec(name: str, description: str, uses_llm: bool = False, interactive_only: bool = False,
          **args: str) -> ActionSpec:
    return ActionSpec(name=name, description=description, args=args, uses_llm=uses_llm,
                      interactive_only=interactive_only)


VALIDATE_SUBMISSION = "Validate Submission"

ACTION_SPECS: dict[str, ActionSpec] = {
    s.name: s
    for s in [
        _spec("List Files", "List the files and folders in a folder of the workspace.",
              dir_path="a folder relative to the workspace, e.g. \".\""),
        _spec("Read File", "Return the full text of a file.", file_name="a file relative to the workspace"),
        _spec("Write File", "Replace a file's content, creating the file if needed.",
              file_name="a file relative to the workspace", content="the new text of the file"),
        _spec("Append File", "Add text at the end of a file.",
              file_name="a file relative to the workspace", content="text to add"),
        _spec("Copy File", "Copy a file to a new name in the workspace.",
              source="the file to copy", destination="where to put the copy"),
        _spec("Undo Edit Script", "Put back the version of a file from before its last edit.",
              script_name="the file whose last edit to undo"),
        _spec("Execute Script", "Run a Python script in the workspace and return what it printed.",
              script_name="a .py file relative to the workspace"),
        _spec("Python REPL", "Run Python code in a persistent interpreter (separate from the harness).",
              command="Python code to run"),
        _spec("Final Answer", "Submit: ends the run. The workspace as it is now is scored.",
              final_answer="a short account of what you did and the result"),
        _spec("Understand File", "Have a model read a (possibly long) file and report on what you ask.",
              uses_llm=True, file_name="a file relative to the workspace",
              things_to_look_for="what to find or summarise in it"),
        _spec("Inspect Script Lines", "Show numbered lines of a script, at most 100 at a time.",
              script_name="a file relative to the workspace", start_line_number="first line (1-based)",
              end_line_number="last line, at most start + 99"),
        _spec("Edit Script (AI)", "Have a model edit a whole script as you instruct; returns the diff.",
              uses_llm=True, script_name="the file to edit (created if missing)",
              edit_instruction="precise description of the change", save_name="where to save the result"),
        _spec("Edit Script Segment (AI)", "Have a model edit some lines of a script as you instruct.",
              uses_llm=True, script_name="the file to edit", start_line_number="first line to edit",
              end_line_number="last line to edit", edit_instruction="precise description of the change",
              save_name="where to save the result"),
        _spec("Reflection", "Have a model think over the research log and what you ask.", uses_llm=True,
              things_to_reflect_on="the question to reflect on"),
        _spec("Retrieval from Research Log", "Have a model recall from the research log what bears on a plan.",
              uses_llm=True, current_plan="your current plan"),
        _spec("Append Summary to Research Log", "Add a note to the research log (research_log.log).",
              content="the note"),
        _spec("Request Help", "Ask the person running an interactive run for help.", interactive_only=True,
              request="what you need"),
    ]
}

FINAL_ANSWER = "Final Answer"

# Actions a run offers only when started with their flag (the flag each needs): off by default, so runs stay
# comparable with the original's.
OPT_IN_FLAGS = {VALIDATE_SUBMISSION: "--allow-validate"}
OPT_IN_SPECS: dict[str, ActionSpec] = {
    VALIDATE_SUBMISSION: ActionSpec(
        name=VALIDATE_SUBMISSION,
        description="Score predictions for the validation inputs against validation labels the harness keeps "
                    "(rows of the training data; never the test set) and return the score.",
        args={"predictions_file": "the predictions file, relative to the workspace (optional)"},
        optional=["predictions_file"]),
}
