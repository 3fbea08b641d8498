# rllm's function-test driver: runs inside the sandbox next to the
# model's solution.py, calls the named function on the arguments read
# from stdin (one JSON value per line, as LiveCodeBench writes them) and
# prints the result's JSON after a marker line. A class Solution is used
# when the program defines one (LeetCode), as rLLM does; a tuple comes
# back as a list. The expected output never enters the sandbox.
import contextlib, io, json, sys

def main():
    fn_name, marker = sys.argv[1], sys.argv[2]
    args = [json.loads(line) for line in sys.stdin.read().split("\n") if line.strip()]
    with open("solution.py") as f:
        src = f.read()
    scope = {"__name__": "solution", "__builtins__": __builtins__}
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink):
        exec(compile(src, "solution.py", "exec"), scope)
        if "class Solution" in src and "Solution" in scope:
            fn = getattr(scope["Solution"](), fn_name)
        else:
            fn = scope[fn_name]
        result = fn(*args)
    if isinstance(result, tuple):
        result = list(result)
    sys.stdout.write("\n" + marker + "\n" + json.dumps(result) + "\n")

main()
