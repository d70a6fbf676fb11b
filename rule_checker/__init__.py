"""The rule checker: every rule instantiated at small shapes and edge values, both sides
evaluated with the interpreter, a counterexample per unsound rule (soundness.py; `hlo-rules
check`). It reads the same rule IR the compiler emits, so a rule cannot mean one thing in the
e-graph and another here.
"""
