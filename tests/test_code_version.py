"""What a results store's key covers (``validation._code``, issue 36 "pay once"):
the code Python executes, not the text. Each edit below is applied to one module
source; the rule is that exactly the edits that can change a number change
:func:`validation._code.numerics`."""

import pytest

from validation._code import numerics

BASE = '''"""Module docstring."""
import math

RATE = 0.5  # a comment


class Model:
    """Class docstring."""

    def step(self, x):
        """Method docstring."""
        if x > 0:
            return math.exp(-RATE * x)
        else:
            "a bare string in an else branch"
            raise ValueError("x must be positive")
'''

SAME = {
    "module docstring": ('"""Module docstring."""', '"""Another module docstring."""'),
    "class docstring": ('"""Class docstring."""', '"""Class docstring, longer."""'),
    "method docstring removed": ('        """Method docstring."""\n', ""),
    "comment": ("# a comment", "# another comment, longer"),
    "blank lines": ("import math\n", "import math\n\n\n\n"),
    "bare string": ('"a bare string in an else branch"', '"changed"'),
    "line continuation": ("return math.exp(-RATE * x)", "return math.exp(\n-RATE * x)"),
}
CHANGED = {
    "constant": ("RATE = 0.5", "RATE = 0.25"),
    "operator": ("-RATE * x", "-RATE / x"),
    "comparison": ("x > 0", "x >= 0"),
    "message": ('"x must be positive"', '"x must be > 0"'),
    "name": ("math.exp", "math.expm1"),
    "statement added": ("        if x > 0:", "        x = x + 0.0\n        if x > 0:"),
}


@pytest.mark.parametrize("edit", list(SAME))
def test_edits_that_execute_nothing_keep_the_digest(edit):
    old, new = SAME[edit]
    assert old in BASE
    assert numerics(BASE.replace(old, new)) == numerics(BASE)


@pytest.mark.parametrize("edit", list(CHANGED))
def test_edits_that_change_what_runs_change_the_digest(edit):
    old, new = CHANGED[edit]
    assert old in BASE
    assert numerics(BASE.replace(old, new)) != numerics(BASE)


def test_a_body_of_only_a_docstring_still_parses_the_same_as_pass():
    # a function whose body is only its docstring executes nothing: it equals `pass`
    assert numerics('def f():\n    """Doc."""\n') == numerics("def f():\n    pass\n")
    assert numerics('def f():\n    """Doc."""\n') != numerics("def f():\n    return 1\n")
