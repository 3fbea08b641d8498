import http.client, json, os, sys, threading, urllib.parse
from concurrent.futures import ThreadPoolExecutor

# Threads that each keep one connection to the gateway open across
# episodes; each request carries its own episode's session and token.
local = threading.local()
out = threading.Lock()

def post(env, path, body):
    url = urllib.parse.urlsplit(env["OPENAI_BASE_URL"])
    data = json.dumps(body)
    headers = {"Content-Type": "application/json", "Authorization": "Bearer " + env["OPENAI_API_KEY"]}
    for attempt in (0, 1):
        conn = getattr(local, "conn", None)
        fresh = conn is None
        if fresh:
            conn = local.conn = http.client.HTTPConnection(url.hostname, url.port)
        try:
            conn.request("POST", url.path + path, data, headers)
            r = conn.getresponse()
            reply = r.read()
            break
        except (http.client.HTTPException, OSError):
            conn.close()
            local.conn = None
            if fresh or attempt:  # only a kept-alive connection the gateway closed is retried
                raise
    if r.status != 200:
        raise RuntimeError("the gateway answered %d: %s" % (r.status, reply[:200]))
    return json.loads(reply)

def handle(msg):
    try:
        reply = post(msg["env"], "/chat/completions",
                     {"model": "policy", "messages": [{"role": "user", "content": msg["task"]["question"]}]})
        line = {"episode_id": msg["episode_id"], "answer": reply["choices"][0]["message"]["content"] or ""}
    except Exception as e:
        line = {"episode_id": msg["episode_id"], "error": "%s: %s" % (type(e).__name__, e)}
    with out:
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()

pool = ThreadPoolExecutor(max_workers=int(os.environ.get("AGENT_THREADS", "16")))
for line in sys.stdin:
    msg = json.loads(line)
    if not msg.get("cancel"):
        pool.submit(handle, msg)
