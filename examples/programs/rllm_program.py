"""Turn an agent function into an rllm agent program, with nothing but
Python's standard library.

    import rllm_program

    async def solve(task, client):
        reply = await client.chat([{"role": "user", "content": task["question"]}])
        return reply["choices"][0]["message"]["content"]

    rllm_program.run(solve)

The same file works both ways rllm runs programs (docs/gateway.md):

- workflow.args.mode=per_episode (the default): one process per episode,
  the task on stdin, the session in OPENAI_BASE_URL / OPENAI_API_KEY;
- workflow.args.mode=serve (rllm sets RLLM_PROGRAM_MODE=serve): one
  process for the run, an episode per stdin line, each solved in an
  asyncio task with a client for that episode's session, answered in any
  order, cancelled when rllm says so.

solve returns the answer (scored by env.name's reward function), or a
dict {"reward": x} to score the episode itself. An exception fails the
episode with its message (and, served, the process goes on). client.chat
posts an OpenAI chat completion and returns the decoded JSON reply;
client.post does the same for any path under the session's /v1
(client.env holds all the session's variables, for other SDKs).
"""
import asyncio
import json
import os
import sys
import traceback
import urllib.parse

__all__ = ["Client", "run"]


# Idle kept-alive connections to the gateway, shared by the episodes of
# a serving process (each request carries its own session's token).
_idle = {}


class Client:
    """One episode's session of the recording gateway: HTTP/1.1 over a
    kept-alive connection, standard library only."""

    def __init__(self, env):
        self.env = env
        self.base_url = env["OPENAI_BASE_URL"]
        self.api_key = env["OPENAI_API_KEY"]
        u = urllib.parse.urlsplit(self.base_url)
        if u.scheme != "http":
            raise ValueError("OPENAI_BASE_URL %r is not http://" % self.base_url)
        self._host, self._port, self._path = u.hostname, u.port or 80, u.path.rstrip("/")
        self._conn = None
        self._busy = False

    async def chat(self, messages, **params):
        """POST /chat/completions; the gateway pins the model and sampling."""
        return await self.post("/chat/completions", dict(params, model=params.get("model", "policy"), messages=messages))

    async def post(self, path, body):
        data = json.dumps(body).encode()
        head = ("POST %s%s HTTP/1.1\r\nHost: %s:%d\r\nAuthorization: Bearer %s\r\n"
                "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                % (self._path, path, self._host, self._port, self.api_key, len(data))).encode()
        for attempt in (0, 1):
            fresh = False
            if self._conn is None:
                idle = _idle.get((self._host, self._port))
                if idle:
                    self._conn = idle.pop()
                else:
                    self._conn = await asyncio.open_connection(self._host, self._port)
                    fresh = True
            reader, writer = self._conn
            self._busy = True  # until the whole response is read
            try:
                writer.write(head + data)
                await writer.drain()
                status, body = await _read_response(reader)
                self._busy = False
                break
            except (ConnectionError, asyncio.IncompleteReadError, ValueError, IndexError):
                self._drop()
                if fresh or attempt:  # a kept-alive connection the server closed: once more
                    raise
        reply = json.loads(body) if body else {}
        if status != 200:
            msg = reply.get("error", {}).get("message", body[:200]) if isinstance(reply, dict) else body[:200]
            raise RuntimeError("the gateway answered %d: %s" % (status, msg))
        return reply

    def close(self):
        """Hands the connection back for the next episode."""
        if self._conn is not None:
            if not self._busy and not self._conn[0].at_eof():
                _idle.setdefault((self._host, self._port), []).append(self._conn)
            else:
                self._conn[1].close()
            self._conn = None

    def _drop(self):
        if self._conn is not None:
            self._conn[1].close()
            self._conn = None


async def _read_response(reader):
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("the connection closed before a response")
    status = int(status_line.split()[1])
    length, chunked = None, False
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        name = name.strip().lower()
        if name == "content-length":
            length = int(value)
        elif name == "transfer-encoding" and "chunked" in value.lower():
            chunked = True
    if chunked:
        parts = []
        while True:
            size = int((await reader.readline()).split(b";")[0], 16)
            if size == 0:
                await reader.readline()
                break
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
        return status, b"".join(parts)
    return status, (await reader.readexactly(length) if length else b"")


def _result(episode_id, out):
    if isinstance(out, dict) and ("reward" in out or "answer" in out):
        line = dict(out)
    else:
        line = {"answer": out if isinstance(out, (str, int, float)) or out is None else json.dumps(out)}
    if episode_id is not None:
        line = dict(episode_id=episode_id, **line)
    return json.dumps(line)


async def _solve_one(solve, task, env):
    client = Client(env)
    try:
        return await solve(task, client)
    finally:
        client.close()


async def _serve(solve):
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=64 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    running = {}

    async def episode(msg):
        eid = msg["episode_id"]
        try:
            out = await _solve_one(solve, msg["task"], msg["env"])
            line = _result(eid, out)
        except asyncio.CancelledError:
            return
        except Exception as e:  # the episode fails, the program goes on
            traceback.print_exc()
            line = json.dumps({"episode_id": eid, "error": "%s: %s" % (type(e).__name__, e)})
        finally:
            running.pop(eid, None)
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    while True:
        raw = await reader.readline()
        if not raw:
            break  # stdin closed: no more episodes
        msg = json.loads(raw)
        if msg.get("cancel"):
            t = running.pop(msg["episode_id"], None)
            if t is not None:
                t.cancel()
            continue
        running[msg["episode_id"]] = asyncio.create_task(episode(msg))
    if running:
        await asyncio.gather(*running.values(), return_exceptions=True)


def run(solve):
    """Run solve as an rllm agent program, per episode or served."""
    if os.environ.get("RLLM_PROGRAM_MODE") == "serve":
        asyncio.run(_serve(solve))
        return
    task = json.loads(sys.stdin.readline())
    out = asyncio.run(_solve_one(solve, task, dict(os.environ)))
    print(_result(None, out))
