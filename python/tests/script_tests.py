# SPDX-License-Identifier: MIT
"""The test files' script mode (ctest runs them as scripts, pytest as
modules): each test_* function of a module's globals in name order, a line
each, exit 1 on a failed assertion, 77 (ctest's skip) where the module
cannot run here."""
SKIP = 77


def run(namespace, missing=None):
    """Runs the test_* callables of NAMESPACE (a module's globals()); MISSING,
    when not None, is why they cannot run here: skipped."""
    if missing is not None:
        print(f"skipped: {missing}")
        return SKIP
    tests = [f for name, f in sorted(namespace.items()) if name.startswith("test_") and callable(f)]
    failed = 0
    for t in tests:
        try:
            t()
            print("ok:", t.__name__)
        except AssertionError as e:
            failed += 1
            print("FAIL:", t.__name__, e)
    print(f"{len(tests) - failed} passed, {failed} failed")
    return 1 if failed else 0
