# rllm's test harness: runs inside the sandbox next to the model's
# solution.py and runs the tests of one reply (stdin, function or
# assert-style), each in a process forked from this warm interpreter (no
# interpreter start per test), with its own CPU rlimit and its own wall
# time. A test's stdout goes to a file (bounded by the sandbox's
# file-size rlimit) of which the first out_cap bytes are kept. It writes
# one JSON line per test as the test ends (so a run cut short keeps what
# it did); rllm compares the outputs outside the sandbox, so the expected
# outputs never enter it.
#
# Proof (docs/code.md, "Reward hacking"): rllm writes one random token a
# test into .rllm-tokens; this harness opens it, removes it and keeps
# only the descriptor, so that no file, environment variable or
# descriptor of a test's process holds a token when the model's code
# runs. A function or assert-style test's process reads its own token
# and compiles it into the code that runs after the last test statement
# (never into a variable): only a test that ran to its end writes it to
# the proof pipe. Each result line carries its test's token (the seal),
# read after the test's processes are gone, so a line the model writes
# itself is refused by rllm. Inside a test's process an audit hook keeps
# the model's code from the ways to that compiled token: frames' code
# objects, the garbage collector's object lists, tracing, ctypes and
# /proc (its own memory). The harness and the tests are non-dumpable, so
# no other process of the sandbox can read their memory or descriptors.
import builtins, json, os, resource, select, signal, sys, time

TOKENS = ".rllm-tokens"
TOKEN_LEN = 26  # Go's crypto/rand.Text(); each followed by a newline


def main():
    undumpable()
    tokfd = os.open(TOKENS, os.O_RDONLY)
    os.unlink(TOKENS)
    with open("tests.json") as f:
        spec = json.load(f)
    # The tests (assert-style tests hold their expected values) are not
    # left for the model's code to read.
    os.unlink("tests.json")
    with open("solution.py") as f:
        spec["src"] = f.read()
    kind = spec["kind"]
    try:
        code = compile(spec["src"], "solution.py", "exec")
    except BaseException:
        code = None
        err = format_exc()
    if kind == "program":
        spec["trusted"] = trusted_types(spec["prelude"])
        spec["base"] = pin_base(spec["prelude"])
    os.makedirs(".rllm", exist_ok=True)
    keep = set(os.listdir("."))
    paths = (".rllm/in", ".rllm/out", ".rllm/err")
    for i in range(len(spec["inputs"])):
        if code is None:
            emit(i, tokfd, {"exit": 1, "err": err[-256:]})
            break
        with open(paths[0], "w") as f:
            f.write(spec["inputs"][i] if kind != "program" else "")
        prf, pwf = os.pipe()
        start = time.monotonic()
        try:
            pid = os.fork()
        except OSError as e:
            os.close(prf)
            os.close(pwf)
            emit(i, tokfd, {"exit": 1, "err": "BlockingIOError: fork: " + str(e)})
            break
        if pid == 0:
            # Never returns: the test ends in os._exit, or its exception
            # (or SystemExit) goes up through frames that hold no token
            # and ends the process as it would end `python3 solution.py`.
            child(spec, i, code, paths, tokfd, pwf)
        os.close(pwf)
        status, cpu, timed_out = wait(pid, spec["timeout_s"])
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        if timed_out:
            os.waitpid(pid, 0)
        if spec["isolated"]:
            # Nothing of this test reaches the next: every other process
            # of the sandbox's PID namespace (setsid() escapes the test's
            # process group) ...
            kill_rest()
        took = time.monotonic() - start
        proof = read_pipe(prf)
        out = read(paths[1], spec["out_cap"] + 1)
        try:
            big = os.stat(paths[1]).st_size > spec["out_cap"]
        except OSError:
            big = False
        err = read(paths[2], 1 << 20)[-256:]
        if spec["isolated"]:
            # ... and every file it left.
            clean(keep)
        r = {"took": took, "cpu": cpu, "out": out.decode("utf-8", "replace"), "err": err.decode("utf-8", "replace"),
             "proof": proof.decode("ascii", "replace")}
        if big or len(out) > spec["out_cap"]:
            r["over"] = True
            r["out"] = ""
        if timed_out:
            r["timeout"] = True
        elif os.WIFSIGNALED(status):
            r["exit"] = 128 + os.WTERMSIG(status)
        else:
            r["exit"] = os.WEXITSTATUS(status)
        emit(i, tokfd, r)
        failed = timed_out or r.get("over") or r.get("exit")
        if failed and spec["stop_on_error"]:
            break


def child(spec, i, code, paths, tokfd, pwf):
    _exit = os._exit  # the model's code may replace os._exit
    os.setpgid(0, 0)
    fd = os.open(paths[0], os.O_RDONLY)
    os.dup2(fd, 0)
    for n, p in ((1, paths[1]), (2, paths[2])):
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, n)
    lower(resource.RLIMIT_CPU, spec["cpu_s"], spec["cpu_s"] + 1)
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    sys.stdin = open(0, "r", closefd=False)
    sys.stdout = out = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)
    kind = spec["kind"]
    if kind == "stdin":
        # The output is the result: nothing to prove.
        scope = {"__name__": "__main__", "__builtins__": builtins}
        run(code, scope, tokfd, pwf)
        out.flush()
        _exit(0)
    # The tail (the tests, then the proof) is compiled before the model's
    # code runs and lives only on this frame's value stack while it runs.
    # An assert-style test's pinned values (pin) go from spec to this
    # frame's value stack before the model's code runs, and reach the
    # test as its tail's locals.
    scope = {"__name__": "__main__" if kind == "program" else "solution", "__builtins__": builtins}
    exec(tail(spec, i, tokfd, pwf), scope, tail_locals(spec.pop("pins", None), run(program(spec, code, i), scope, tokfd, pwf)))
    _exit(0)


def tail_locals(pins, scope):
    """The tail's locals: for an assert-style test, the values it reads
    that were there before the model's code ran (pin); else scope."""
    return scope if pins is None else {PIN: pins}


def program(spec, code, i):
    """The model's code, and for assert-style tests the prelude before
    it, compiled apart from the tests so that no text of the reply (an
    open string, say) can swallow a test."""
    if spec["kind"] != "program":
        return code
    return compile(spec["prelude"] + spec["src"], "solution.py", "exec")


def tail(spec, i, tokfd, pwf):
    """The code after the model's: the test (assert-style), or the call
    and the printed result (function), then the token written to the
    proof pipe. The token is a constant of this code object only, and so
    is the test: this process's copy of the tests is emptied, so that no
    frame the model's code can reach (a signal handler is handed one)
    holds a test."""
    token = os.pread(tokfd, TOKEN_LEN, i * (TOKEN_LEN + 1)).decode("ascii")
    inp = spec["inputs"][i]
    spec["inputs"] = []
    if spec["kind"] == "program":
        import ast
        src, spec["pins"] = pin(ast.parse(inp), spec["base"], spec["fn"])
        src = checked(src, spec["trusted"])
    else:
        args = "[" + ",".join(l for l in inp.split("\n") if l.strip()) + "]"
        fn = spec["fn"]
        if "class Solution" in spec["src"]:
            call = "__rllm_fn = getattr(Solution(), %r) if 'Solution' in globals() else globals()[%r]\n" % (fn, fn)
        else:
            call = "__rllm_fn = globals()[%r]\n" % fn
        src = ("import json as __rllm_json, sys as __rllm_sys\n" + call +
               "__rllm_r = __rllm_fn(*__rllm_json.loads(%r))\n" % args +
               "if type(__rllm_r) is tuple:\n    __rllm_r = list(__rllm_r)\n"
               "__rllm_sys.stdout.write('\\n' + %r + '\\n' + __rllm_json.dumps(__rllm_r) + '\\n')\n" % spec["marker"])
    proof = "import sys as __rllm_sys, os as __rllm_os\n__rllm_sys.stdout.flush()\n__rllm_os.write(%d, %r)\n" % (pwf, token.encode())
    if spec["kind"] == "program":
        import ast
        src.body += ast.parse(proof).body
        return compile(src, "<tests>", "exec")
    return compile(src + proof, "<tests>", "exec")


def trusted_types(prelude):
    """The hashes of every class that exists before the model's code runs
    (the prelude and the standard library's common modules imported
    first), and of those among them that are mappings or containers,
    whose elements are checked too. A class the model's code makes is
    not among them."""
    import collections, datetime, decimal, fractions, operator
    exec(prelude, {})
    seen, stack = {}, [object]
    while stack:
        t = stack.pop()
        h = type.__hash__(t)
        if h in seen:
            continue
        seen[h] = t
        try:
            stack.extend(type.__subclasses__(t))
        except TypeError:
            pass
    containers = (list, tuple, set, frozenset, collections.deque)
    mappings = frozenset(h for h, t in seen.items() if dict in t.__mro__)
    sequences = frozenset(h for h, t in seen.items() if any(c in t.__mro__ for c in containers))
    return frozenset(seen), mappings, sequences


# OVERRIDES are the methods by which an object could fool a comparison,
# a truth test or arithmetic.
OVERRIDES = frozenset((
    "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__hash__", "__bool__", "__len__", "__iter__",
    "__next__", "__getitem__", "__contains__", "__getattr__", "__getattribute__", "__class__",
    "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
    "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__pow__", "__rpow__", "__neg__", "__pos__",
    "__abs__", "__float__", "__int__", "__index__", "__round__", "__complex__", "__and__", "__rand__",
    "__or__", "__ror__", "__xor__", "__rxor__", "__lshift__", "__rlshift__", "__rshift__", "__rrshift__",
    "__matmul__", "__rmatmul__", "__divmod__", "__rdivmod__", "__invert__"))


PIN = "__rllm_pinned__"  # a dunder: never mangled in a class body


def pin_base(prelude):
    """What a test may read from outside itself, as it is before any
    model's code runs (made once, in the harness): the builtins and the
    names the prelude defines, but for dunders (__name__ is the
    program's, not the builtins module's: "if __name__ == '__main__'")."""
    pre = {"__builtins__": builtins}
    exec(prelude, pre)
    return {k: v for k, v in list(vars(builtins).items()) + list(pre.items()) if k[:2] != "__"}


def pin(tree, base, fn):
    """The test, rewritten to read what it takes from outside itself as
    it was before the model's code ran: every name of base (pin_base)
    and every module attribute (math.isclose, os.path.join) the
    test reads becomes an item of one tuple made now, so a reply that
    replaces builtins.abs, math.isclose or its own __builtins__ changes
    nothing the test calls. The test becomes the body of a function
    taking the tuple (a local of its frame, which the model's code cannot
    rebind), and each function the test defines takes it as a keyword
    default. Names the test binds itself (but for imports, which bind
    the modules and values pinned here), and fn, the function the model
    writes, are read as before. Returns the new tree and the tuple."""
    import ast, importlib
    bound, imported = {fn}, {}

    def known(name):
        """The module name, imported now if it is the standard library's
        or loaded already; never a file of the work directory (the
        model's solution.py), whose code must not run before the audit
        hook is in place."""
        top = (name or "").partition(".")[0]
        if top not in sys.modules and top not in getattr(sys, "stdlib_module_names", ()):
            raise ImportError(name)
        return importlib.import_module(name)
    # Names a match statement binds (Python 3.10 and later).
    matches = tuple(getattr(ast, c) for c in ("MatchAs", "MatchStar", "MatchMapping") if hasattr(ast, c))
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            bound.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(n.name)
        elif isinstance(n, ast.arg):
            bound.add(n.arg)
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            bound.update(n.names)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            bound.add(n.name)
        elif isinstance(n, matches) and getattr(n, "name", None):
            bound.add(n.name)
        elif isinstance(n, matches) and getattr(n, "rest", None):
            bound.add(n.rest)
        elif isinstance(n, ast.Import):
            for a in n.names:
                name = a.asname or a.name.partition(".")[0]
                try:
                    imported[name] = known(a.name if a.asname else name)
                except BaseException:
                    bound.add(name)
        elif isinstance(n, ast.ImportFrom):
            for a in n.names:
                name = a.asname or a.name
                try:
                    imported[name] = getattr(known(n.module if not n.level else None), a.name)
                except BaseException:
                    bound.add(name)
    module = type(builtins)
    values, index = [], {}

    def slot(v):
        if id(v) not in index:
            index[id(v)] = len(values)
            values.append(v)
        return ast.Subscript(value=ast.Name(id=PIN, ctx=ast.Load()), slice=ast.Constant(index[id(v)]), ctx=ast.Load())

    def resolve(n):
        """(True, value) for a name or module attribute pinned now."""
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            if n.id in imported:
                return True, imported[n.id]
            if n.id not in bound and n.id in base:
                return True, base[n.id]
        elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load):
            ok, v = resolve(n.value)
            if ok and type(v) is module and n.attr in vars(v):
                return True, vars(v)[n.attr]
        return False, None

    class Pin(ast.NodeTransformer):
        def visit_Name(self, n):
            ok, v = resolve(n)
            return slot(v) if ok else n

        def visit_Attribute(self, n):
            ok, v = resolve(n)
            return slot(v) if ok else self.generic_visit(n)

        def visit_FunctionDef(self, n):
            self.generic_visit(n)
            n.args.kwonlyargs.append(ast.arg(arg=PIN))
            n.args.kw_defaults.append(ast.Name(id=PIN, ctx=ast.Load()))
            return n

        visit_AsyncFunctionDef = visit_FunctionDef
        visit_Lambda = visit_FunctionDef

    body = Pin().visit(tree).body or [ast.Pass()]
    run = ast.FunctionDef(name=PIN + "_test", args=ast.arguments(posonlyargs=[], args=[ast.arg(arg=PIN)], kwonlyargs=[],
                                                                  kw_defaults=[], defaults=[]),
                          body=body, decorator_list=[], returns=None, type_params=[])
    call = ast.Expr(ast.Call(func=ast.Name(id=PIN + "_test", ctx=ast.Load()), args=[ast.Name(id=PIN, ctx=ast.Load())], keywords=[]))
    return ast.fix_missing_locations(ast.Module(body=[run, call], type_ignores=[])), tuple(values)


def checked(tree, trusted):
    """The test's tree with every value the test compares,
    asserts or computes with checked first: an object of a class the
    model's code made (one whose __eq__ returns True, whose __sub__
    returns 0) fails the test instead of fooling it. The check uses no
    name the model's code could rebind: type comes from a constant's
    class, the classes allowed are a constant of the code."""
    import ast
    allowed, mappings, sequences = trusted
    consts = {"A": allowed, "M": mappings, "S": sequences, "D": OVERRIDES}
    # A value passes when its class existed before the model's code ran,
    # or is a plain class (made by type) whose own classes override none
    # of OVERRIDES (a namedtuple); the elements of a mapping or container
    # pass too.
    source = ("(lambda g: lambda x: x if g(g, x) else [][0])("
              "lambda g, x, T=().__class__.__class__: "
              "(T.__hash__(T(x)) in A or (T(T(x)) is T and False not in "
              "[T.__hash__(c) in A or not (D & c.__dict__.keys()) for c in T(x).__mro__])) and "
              "(True not in [T.__hash__(c) in M for c in T(x).__mro__] or "
              "False not in [g(g, k) and g(g, v) for k, v in T({}).items(x)]) and "
              "(True not in [T.__hash__(c) in S for c in T(x).__mro__] or False not in [g(g, e) for e in x]))")

    class Consts(ast.NodeTransformer):
        def visit_Name(self, n):
            return ast.Constant(consts[n.id]) if n.id in consts else n

    def wrap(e):
        check = Consts().visit(ast.parse(source, mode="eval").body)
        return ast.Call(func=check, args=[e], keywords=[])

    class Wrap(ast.NodeTransformer):
        def visit_Compare(self, n):
            self.generic_visit(n)
            if not any(isinstance(o, (ast.Is, ast.IsNot)) for o in n.ops):
                n.left = wrap(n.left)
                n.comparators = [wrap(c) for c in n.comparators]
            return n

        def visit_BinOp(self, n):
            self.generic_visit(n)
            n.left, n.right = wrap(n.left), wrap(n.right)
            return n

        def visit_Assert(self, n):
            self.generic_visit(n)
            n.test = wrap(n.test)
            return n

    tree = Wrap().visit(tree)
    return ast.fix_missing_locations(tree)


def run(code, scope, tokfd, pwf):
    """Runs the model's code in scope and returns scope: only the
    standard descriptors and the proof pipe stay open, and the audit
    hook is in place first."""
    os.closerange(3, pwf)
    os.closerange(pwf + 1, 1 << 16)
    guard()
    exec(code, scope)
    return scope


def guard(_int=int, _str=str, _fspath=os.fspath, _decode=os.fsdecode, _getcwd=os.getcwd,
          _stat=os.stat, _error=RuntimeError, _denied=PermissionError):
    """An audit hook (which no code can remove) refusing the ways from
    the model's code to a token compiled into the tests' code: a frame's
    code object, the objects the collector tracks, tracing (which can
    also jump over a test's lines), raw memory (ctypes, /proc/self/mem),
    directory descriptors (to open /proc relative to one) and new links
    (to race the path check). Everything it calls is bound here, so no
    patched builtin or module changes it."""
    refused = frozenset(("sys.settrace", "sys.setprofile", "gc.get_objects", "gc.get_referrers",
                         "gc.get_referents", "os.symlink", "os.link"))
    devices = frozenset(("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"))

    def hook(event, args):
        if event in refused or event[:7] == "ctypes.":
            raise _error(event + " is not allowed in rllm's test harness")
        if event == "object.__getattr__" and args[1] == "f_code":
            raise _error("a frame's f_code is not allowed in rllm's test harness")
        if event == "import" and args[0] in ("ctypes", "_ctypes"):
            raise _error("ctypes is not allowed in rllm's test harness")
        if event == "open" and type(args[0]) is not _int:
            p = _decode(_fspath(args[0]))
            if p[:1] != "/":
                p = _getcwd() + "/" + p
            # Lexically: the model cannot make links, and the sandbox's
            # own links into /proc are under /dev.
            parts = []
            for c in p.split("/"):
                if c == "..":
                    if parts:
                        parts.pop()
                elif c and c != ".":
                    parts.append(c)
            p = "/" + "/".join(parts)
            if (parts and parts[0] == "proc") or (parts and parts[0] == "dev" and p not in devices):
                raise _denied("opening " + p + " is not allowed in rllm's test harness")
            try:
                st = _stat(p)
            except OSError:
                return
            if st.st_mode & 0o170000 == 0o040000:
                raise _denied("opening the directory " + p + " is not allowed in rllm's test harness")

    sys.addaudithook(hook)


def lower(which, soft, hard):
    """Sets an rlimit no higher than the one the sandbox set."""
    _, cur = resource.getrlimit(which)
    if cur != resource.RLIM_INFINITY:
        soft, hard = min(soft, cur), min(hard, cur)
    resource.setrlimit(which, (soft, hard))


def emit(i, tokfd, r):
    """Writes test i's result line, sealed with its token (read now that
    the test's processes are gone)."""
    r["seal"] = os.pread(tokfd, TOKEN_LEN, i * (TOKEN_LEN + 1)).decode("ascii")
    line = (json.dumps(r) + "\n").encode()
    while line:
        line = line[os.write(1, line):]


def kill_rest():
    """Kills every process of the sandbox but this one (and the sandbox's
    init). Only in a sandbox with its own PID namespace: kill(-1) on a
    host would reach every process of the user."""
    try:
        os.kill(-1, signal.SIGKILL)
    except OSError:
        pass
    while True:  # as PID 1 (docker) the orphans are ours to reap
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break


def clean(keep):
    """Removes what a test left in the work directory (all but keep), in
    .rllm (all but the harness's three files) and in /tmp (the sandbox's
    own)."""
    for d, names in ((".", set(os.listdir(".")) - keep), (".rllm", set(os.listdir(".rllm")) - {"in", "out", "err"}),
                     ("/tmp", os.listdir("/tmp"))):
        for n in names:
            p = os.path.join(d, n)
            if os.path.isdir(p) and not os.path.islink(p):
                import shutil
                shutil.rmtree(p, ignore_errors=True)
            else:
                try:
                    os.unlink(p)
                except OSError:
                    pass


def wait(pid, timeout):
    """Waits for pid up to timeout seconds; returns (status, the CPU
    seconds it used, timed_out). The CPU time tells a kill by the CPU
    rlimit's hard limit (SIGKILL) from any other SIGKILL."""
    deadline = time.monotonic() + timeout
    try:
        pfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pfd = None
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None, 0.0, True
            if pfd is not None:
                select.select([pfd], [], [], left)
            else:
                time.sleep(min(left, 0.002))
            got, status, ru = os.wait4(pid, os.WNOHANG)
            if got == pid:
                return status, ru.ru_utime + ru.ru_stime, False
    finally:
        if pfd is not None:
            os.close(pfd)


def read_pipe(fd):
    os.set_blocking(fd, False)
    try:
        return os.read(fd, 4 * TOKEN_LEN)
    except OSError:
        return b""
    finally:
        os.close(fd)


def read(path, n):
    try:
        with open(path, "rb") as f:
            return f.read(n)
    except OSError:
        return b""


def format_exc():
    import traceback
    return traceback.format_exc(limit=0)


def undumpable():
    """Makes this process non-dumpable (and with it every test's process
    forked from it), so that no process of the sandbox (same uid, no
    capabilities) can open /proc/<pid>/fd or /proc/<pid>/mem of another."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
    except Exception:
        pass


main()
