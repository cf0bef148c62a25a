"""The user/system prompts of the real benchmarks, shared by the synthetic tasks and the registry.

Train-time demonstrations and eval-time generations must see the same prompt text, so both build
it here. Math follows the spec (Qwen-style "reason step by step" + MathArena's AIME integer note);
code is LiveCodeBench's generic chat form (lcb_runner/prompts/code_generation.py).
"""

from __future__ import annotations

MATH_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
INTEGER_NOTE = "The answer is an integer between 0 and 999 inclusive."

LCB_SYSTEM_MESSAGE = (
    "You are an expert Python programmer. You will be given a question (problem specification) "
    "and will generate a correct Python program that matches the specification and passes all "
    "tests."
)
LCB_FORMAT_WITH_STARTER_CODE = (
    "You will use the following starter code to write the solution to the problem and enclose "
    "your code within delimiters."
)
LCB_FORMAT_WITHOUT_STARTER_CODE = (
    "Read the inputs from stdin solve the problem and write the answer to stdout (do not "
    "directly test on the sample inputs). Enclose your code within delimiters as follows. Ensure "
    "that when the python program runs, it reads the inputs, runs the algorithm and writes output "
    "to STDOUT."
)


def math_user_message(problem: str, integer_answer: bool) -> str:
    """The single user turn of a math problem (AIME-style sets add the integer note)."""
    text = f"{problem}\n\n{MATH_INSTRUCTION}"
    return f"{text}\n{INTEGER_NOTE}" if integer_answer else text


def code_messages(question: str, starter_code: str) -> list[dict[str, str]]:
    """LCB's generic system + user turns; the starter code selects the functional format."""
    user = f"### Question:\n{question}\n\n"
    if starter_code:
        user += f"### Format: {LCB_FORMAT_WITH_STARTER_CODE}\n```python\n{starter_code}\n```\n\n"
    else:
        user += f"### Format: {LCB_FORMAT_WITHOUT_STARTER_CODE}\n"
        user += "```python\n# YOUR CODE HERE\n```\n\n"
    user += "### Answer: (use the provided format with backticks)\n\n"
    return [
        {"role": "system", "content": LCB_SYSTEM_MESSAGE},
        {"role": "user", "content": user},
    ]
