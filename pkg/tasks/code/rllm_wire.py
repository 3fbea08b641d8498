# The messages rllm's code harnesses exchange (docs/code.md, "Reward
# hacking"): one JSON object a line. The reply's process (harness.py) and
# the test's (judge.py) run in sandboxes of their own and never see each
# other; rllm relays every line between them, checks it and writes it
# again, so each side reads only well-formed messages of plain values.
#
# A value is JSON null, true, false, a string, an integer (no '.', 'e'),
# a float (with '.' or 'e'), a list, or an object of one key:
#   {"t": [...]} tuple          {"s": [...]} set      {"fs": [...]} frozenset
#   {"d": [[k, v], ...]} dict   {"b": "base64"} bytes {"c": [re, im]} complex
#   {"f": "nan" | "inf" | "-inf"}
#   {"Counter" | "OrderedDict": [[k, v], ...]}  {"defaultdict": [factory, [[k, v], ...]]}
#   {"deque": [[...], maxlen]}  {"Fraction": [n, d]}  {"Decimal": "1.5"}
#   {"nt": [typename, [field, ...], [value, ...]]} a namedtuple
#   {"h": n} the reply's object n, {"j": n} the judge's object n: what is
#   not a plain value stays where it was made and crosses as a handle,
#   whose methods the other side may ask to call.
# Each side decodes what it receives into its own classes: no object of
# the other side (no __eq__ of the reply's) ever exists in it.
#
# Requests: {"op": ..., "h": n, "name": s, "names": [...], "args": [...],
# "kw": {...}, "key": v}; answers: {"ret": v} or {"raise": [type, text]};
# while a side waits for its answer it serves the other side's requests
# (a reply calling a function the test passed it).
import base64, builtins, collections, decimal, fractions, json, os, resource, sys

if hasattr(sys, "set_int_max_str_digits"):
    sys.set_int_max_str_digits(0)  # rllm bounds the digits of a number

# Bound now, before any program runs: a program that replaces os.write
# or json.dumps in its own process does not silence its answers.
_read, _write, _dumps, _loads = os.read, os.write, json.dumps, json.loads

MAX_DEPTH = 100
INF = float("inf")
FACTORIES = {"int": int, "float": float, "str": str, "list": list, "dict": dict, "set": set, "tuple": tuple, "bool": bool}


def no_constant(c):
    raise ValueError("not a JSON number: " + c)


class Dead(BaseException):
    """The other side's process ended (the reply's, during a test): no
    code of the test can go on as if it answered."""


class Remote:
    """An object of the other side, by its handle."""
    __slots__ = ("_c", "_h", "__weakref__")

    def __init__(self, c, h):
        self._c, self._h = c, h

    def _ask(self, op, **kw):
        return self._c.request(dict(kw, op=op, h=self._h))

    def __call__(self, *args, **kw):
        return self._ask("call", args=self._c.enc(list(args)), kw={k: self._c.enc(v) for k, v in kw.items()})

    def __getattr__(self, name):
        if name[:2] == "__":
            raise AttributeError(name)
        return self._ask("get", name=name)

    def __iter__(self):
        return self._ask("iter")

    def __next__(self):
        return self._ask("next")

    def __len__(self):
        return self._ask("len")

    def __getitem__(self, key):
        return self._ask("item", key=self._c.enc(key))

    def __bool__(self):
        return self._ask("bool")

    def __str__(self):
        return self._ask("str")

    def __repr__(self):
        return self._ask("repr")


class Channel:
    """One side's end: lines in on fd rd, out on fd wr. own is the tag of
    this side's handles ("h" the reply's, "j" the judge's)."""

    def __init__(self, rd, wr, own):
        self.rd, self.wr, self.own = rd, wr, own
        self.other = "j" if own == "h" else "h"
        self.buf = b""
        self.objs, self.ids, self.remotes = [], {}, {}
        self.dead = None
        self.serve = None  # op, target, message -> result (set by each side)

    # Lines.

    def recv(self):
        while True:
            i = self.buf.find(b"\n")
            if i >= 0:
                line, self.buf = self.buf[:i], self.buf[i + 1:]
                return _loads(line, parse_constant=no_constant)
            chunk = _read(self.rd, 1 << 16)
            if not chunk:
                raise EOFError("the channel closed")
            self.buf += chunk

    def send(self, m):
        b = (_dumps(m, separators=(",", ":"), allow_nan=False) + "\n").encode()
        while b:
            b = b[_write(self.wr, b):]

    # Requests and answers.

    def request(self, m):
        if self.dead is not None:
            raise Dead(self.dead)
        self.send(m)
        while True:
            a = self.recv()
            if "op" in a:
                self.answer(a)
            elif "ret" in a:
                return self.dec(a["ret"])
            elif "raise" in a:
                raise remote_error(*a["raise"])
            elif "dead" in a:
                self.dead = a["dead"]
                raise Dead(self.dead)
            else:
                raise ValueError("not an answer: %r" % (a,))

    def answer(self, m):
        """Serves one request of the other side and sends its answer.
        What the serving side lets through is its serve function's."""
        try:
            h = m.get("h")
            target = self.obj(h) if h is not None else None
            r = {"ret": self.enc(self.serve(m["op"], target, m))}
        except (Exception, GeneratorExit) as e:
            r = {"raise": [type(e).__name__, str(e)[:1000]]}
        self.send(r)

    # Values.

    def handle(self, x):
        h = self.ids.get(id(x))
        if h is None or self.objs[h] is not x:
            h = len(self.objs)
            self.objs.append(x)
            self.ids[id(x)] = h
        return {self.own: h}

    def obj(self, h):
        if type(h) is not int or not 0 <= h < len(self.objs):
            raise ValueError("no object %r" % (h,))
        return self.objs[h]

    def remote(self, h):
        if type(h) is not int or h < 0:
            raise ValueError("not a handle: %r" % (h,))
        r = self.remotes.get(h)
        if r is None:
            r = self.remotes[h] = Remote(self, h)
        return r

    def enc(self, x, d=0):
        if d > MAX_DEPTH:
            raise ValueError("the value is nested too deeply to cross")
        d += 1
        t = type(x)
        if x is None or t is bool or t is str or t is int:
            return x
        if t is float:
            if x != x:
                return {"f": "nan"}
            if x in (INF, -INF):
                return {"f": "inf" if x > 0 else "-inf"}
            return x
        if t is list:
            return [self.enc(e, d) for e in x]
        if t is tuple:
            return {"t": [self.enc(e, d) for e in x]}
        if t is dict:
            return {"d": self.pairs(x, d)}
        if t is set or t is frozenset:
            return {"s" if t is set else "fs": [self.enc(e, d) for e in x]}
        if t is bytes or t is bytearray:
            return {"b": base64.b64encode(x).decode()}
        if t is complex:
            return {"c": [self.enc(x.real, d), self.enc(x.imag, d)]}
        if t is Remote:
            if x._c is not self:
                raise ValueError("a handle of another channel")
            return {self.other: x._h}
        if t is collections.Counter or t is collections.OrderedDict:
            return {t.__name__: self.pairs(x, d)}
        if t is collections.defaultdict:
            f = x.default_factory
            return {"defaultdict": [f.__name__ if f in FACTORIES.values() else None, self.pairs(x, d)]}
        if t is collections.deque:
            return {"deque": [[self.enc(e, d) for e in x], x.maxlen]}
        if t is fractions.Fraction:
            return {"Fraction": [x.numerator, x.denominator]}
        if t is decimal.Decimal:
            return {"Decimal": str(x)}
        if isinstance(x, tuple) and type(getattr(t, "_fields", None)) is tuple:
            return {"nt": [t.__name__, [str(f) for f in t._fields], [self.enc(e, d) for e in x]]}
        # A subclass of a plain type crosses as its plain value (an
        # IntEnum as its int): its own methods stay behind.
        for base in (bool, int, float, str, bytes, list, tuple, dict, set, frozenset):
            if isinstance(x, base):
                if base is dict:
                    return {"d": self.pairs(x, d)}
                return self.enc(base(x) if base is not bool else bool(x), d)
        return self.handle(x)

    def pairs(self, x, d):
        return [[self.enc(k, d), self.enc(v, d)] for k, v in dict.items(x)]

    def dec(self, v, d=0):
        if d > MAX_DEPTH:
            raise ValueError("a value nested too deeply")
        d += 1
        t = type(v)
        if v is None or t is bool or t is str or t is int or t is float:
            return v
        if t is list:
            return [self.dec(e, d) for e in v]
        if t is not dict or len(v) != 1:
            raise ValueError("not a value: %r" % (v,))
        (k, a), = v.items()
        if k == "t":
            return tuple(self.items(a, d))
        if k == "s":
            return set(self.items(a, d))
        if k == "fs":
            return frozenset(self.items(a, d))
        if k == "d":
            return dict(self.kv(a, d))
        if k == "b" and type(a) is str:
            return base64.b64decode(a, validate=True)
        if k == "f" and a in ("nan", "inf", "-inf"):
            return float(a)
        if k == "c" and type(a) is list and len(a) == 2:
            re, im = self.dec(a[0], d), self.dec(a[1], d)
            if type(re) in (int, float) and type(im) in (int, float):
                return complex(re, im)
        if k == self.own:
            return self.obj(a)
        if k == self.other:
            return self.remote(a)
        if k == "Counter":
            return collections.Counter(dict(self.kv(a, d)))
        if k == "OrderedDict":
            return collections.OrderedDict(self.kv(a, d))
        if k == "defaultdict" and type(a) is list and len(a) == 2 and (a[0] is None or a[0] in FACTORIES):
            return collections.defaultdict(FACTORIES.get(a[0]), self.kv(a[1], d))
        if k == "deque" and type(a) is list and len(a) == 2 and (a[1] is None or type(a[1]) is int and a[1] >= 0):
            return collections.deque(self.items(a[0], d), a[1])
        if k == "Fraction" and type(a) is list and len(a) == 2 and all(type(n) is int for n in a) and a[1]:
            return fractions.Fraction(a[0], a[1])
        if k == "Decimal" and type(a) is str:
            return decimal.Decimal(a)
        if k == "nt" and type(a) is list and len(a) == 3:
            return named(a[0], a[1])(*self.items(a[2], d))
        raise ValueError("not a value: %r" % (v,))

    def items(self, a, d):
        if type(a) is not list:
            raise ValueError("not a list: %r" % (a,))
        return [self.dec(e, d) for e in a]

    def kv(self, a, d):
        if type(a) is not list or any(type(p) is not list or len(p) != 2 for p in a):
            raise ValueError("not a list of pairs: %r" % (a,))
        return [(self.dec(p[0], d), self.dec(p[1], d)) for p in a]


_named = {}


def named(name, fields):
    """A namedtuple class of this side, made once per name and fields."""
    if type(name) is not str or type(fields) is not list or not all(type(f) is str for f in fields):
        raise ValueError("not a namedtuple: %r %r" % (name, fields))
    key = (name, tuple(fields))
    if key not in _named:
        _named[key] = collections.namedtuple(name, fields)
    return _named[key]


def remote_error(name, text):
    """The other side's exception, as one of this side's: a builtin
    exception class by its name (a test catching ValueError still does),
    else Exception, marked as the other side's."""
    cls = getattr(builtins, name, None) if type(name) is str else None
    if not (type(cls) is type and issubclass(cls, Exception)):
        cls = Exception
        text = "%s: %s" % (name, text)
    try:
        e = cls(text)
    except Exception:
        e = Exception("%s: %s" % (name, text))
    e.rllm_remote = name
    return e


# What both harnesses do to a test's process.

def lower(which, soft, hard):
    """Sets an rlimit no higher than the one the sandbox set."""
    _, cur = resource.getrlimit(which)
    if cur != resource.RLIM_INFINITY:
        soft, hard = min(soft, cur), min(hard, cur)
    resource.setrlimit(which, (soft, hard))


def read(path, n):
    try:
        with open(path, "rb") as f:
            return f.read(n)
    except OSError:
        return b""
