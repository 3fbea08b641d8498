import json, sys, threading, urllib.request
lock = threading.Lock()
def handle(msg):
    env = msg["env"]
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": msg["task"]["question"]}]}).encode()
    req = urllib.request.Request(env["OPENAI_BASE_URL"] + "/chat/completions", data=body,
        headers={"Content-Type": "application/json", "Authorization": "Bearer " + env["OPENAI_API_KEY"]})
    with urllib.request.urlopen(req) as r:
        reply = json.load(r)
    with lock:
        print(json.dumps({"episode_id": msg["episode_id"], "answer": reply["choices"][0]["message"]["content"] or ""}), flush=True)
for line in sys.stdin:
    msg = json.loads(line)
    if not msg.get("cancel"):
        threading.Thread(target=handle, args=(msg,), daemon=True).start()
