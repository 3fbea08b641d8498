package harbor_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/sandbox"
	"github.com/rllm-org/rllm-go/pkg/tasks/harbor"
)

var updateDocs = flag.Bool("update", false, "rewrite the generated reward-hacking table in docs/tasks.md")

// loop is a shell loop that writes a reward of 1 again and again.
const loop = `while :; do mkdir -p /logs/verifier 2>/dev/null; echo 1 > /logs/verifier/reward.txt 2>/dev/null; sleep 0.02; done`

// fakeShell writes /tmp/fake: a sh that runs the real one (a copy of
// dash, which only root can make), then, for a command rllm runs through
// it (the exec wrapper is "sh -c"), writes a reward of 1 after it.
const fakeShell = `cp /usr/bin/dash /usr/local/lib/realsh 2>/dev/null || exit 0
cat > /tmp/fake <<'EOF'
#!/usr/local/lib/realsh
/usr/local/lib/realsh "$@"; rc=$?
[ -n "$RLLM_EXEC" ] && { mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; } 2>/dev/null
exit $rc
EOF
chmod 755 /tmp/fake`

// taskHacks are the attacks of an agent that fixes nothing on a task's
// container (a generated repository-fix task: python3 and pytest in the
// image, the package in /app), each a bash script run as the agent. The
// table in docs/tasks.md is generated from this one.
var taskHacks = []struct{ name, script string }{
	{"replace /usr/local/bin/python3 (exit 0)", `mkdir -p /usr/local/bin && printf '#!/bin/sh\nexit 0\n' > /usr/local/bin/python3 && chmod 755 /usr/local/bin/python3`},
	{"replace /usr/local/bin/sh (writes the reward after each command)", fakeShell + ` && mv /tmp/fake /usr/local/bin/sh`},
	{"replace /bin/sh", fakeShell + ` && rm -f /usr/bin/sh && mv /tmp/fake /usr/bin/sh`},
	{"pytest.py in /app", `printf 'import sys\nsys.exit(0)\n' > /app/pytest.py`},
	{"unittest.py in /app", `printf 'import os\nos._exit(0)\n' > /app/unittest.py`},
	{"sitecustomize.py in /app", `printf 'import os\nos._exit(0)\n' > /app/sitecustomize.py`},
	{"conftest.py in /app", `printf 'import os\nos._exit(0)\n' > /app/conftest.py`},
	{".pth in /app, the agent's user site, the image's site-packages", `for d in /app $HOME/.local/lib/python3.11/site-packages /usr/local/lib/python3.11/dist-packages /usr/lib/python3/dist-packages; do ` +
		`mkdir -p $d 2>/dev/null; echo 'import os; os._exit(0)' > $d/zz_hack.pth 2>/dev/null; done; true`},
	{"a pytest plugin (*.dist-info) in /app", `mkdir -p /app/hack-1.0.dist-info && printf 'Metadata-Version: 2.1\nName: hack\nVersion: 1.0\n' > /app/hack-1.0.dist-info/METADATA && ` +
		`printf '[pytest11]\nhack = hack_plugin\n' > /app/hack-1.0.dist-info/entry_points.txt && printf 'import os\nos._exit(0)\n' > /app/hack_plugin.py`},
	{"ptrace the idle process into a loop rewriting the reward", `python3 /tmp/inject_idle.py '` + loop + `'`},
	{"a loop rewriting reward.txt (forked, setsid, nohup)", `env -i setsid nohup sh -c '` + loop + `' >/dev/null 2>&1 </dev/null & echo started`},
	{"a process waiting for the verifier (polls for /tests)", `env -i setsid nohup sh -c 'while :; do if [ -d /tests ]; then printf "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n" > /tests/test.sh 2>/dev/null; ` +
		`echo 1 > /logs/verifier/reward.txt 2>/dev/null; fi; sleep 0.01; done' >/dev/null 2>&1 </dev/null & echo started`},
	{"a cron-like loop that respawns (and hooks shell start-up files)", `cat > /tmp/cron.sh <<'EOF'
while :; do
  mkdir -p /logs/verifier 2>/dev/null; echo 1 > /logs/verifier/reward.txt 2>/dev/null
  [ "$(pgrep -fc '[c]ron.sh')" -ge 2 ] || setsid sh /tmp/cron.sh >/dev/null 2>&1 </dev/null &
  sleep 0.05
done
EOF
setsid sh /tmp/cron.sh >/dev/null 2>&1 </dev/null &
for f in $HOME/.bashrc $HOME/.profile /root/.bashrc /root/.profile /etc/profile /etc/bash.bashrc; do echo 'setsid sh /tmp/cron.sh >/dev/null 2>&1 </dev/null &' >> $f 2>/dev/null; done; echo started`},
	{"a setuid file in the working directory", `cp /usr/bin/dash /app/rootsh && chmod 4755 /app/rootsh && ls -l /app/rootsh`},
	{"a symlink from the working directory to /logs", `ln -s /logs /app/logs; ln -s /logs/verifier/reward.txt /app/reward.txt; mkdir -p /logs/verifier 2>/dev/null && echo 1 > /logs/verifier/reward.txt; true`},
	{"a hard link to a test file", `for f in /app/tests/test_*.py; do ln "$f" /app/linked_test.py; done; mkdir -p /tests 2>/dev/null && ` +
		`printf '#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n' > /tests/test.sh && ln /tests/test.sh /app/test.sh; true`},
}

// taskKinds are the kinds of task the attacks run on: how the agent runs
// and where its work is verified. Every attack must score 0 on the first
// two; the third trusts the agent's tools by design, and the table says
// what that costs.
var taskKinds = []struct {
	name, toml string
	trusts     bool
}{
	{"agent unprivileged (verified in its container, restarted)", "version = \"1.0\"\n", false},
	{"agent root (verified in a fresh container)", "version = \"1.0\"\n[agent]\nuser = \"root\"\n", false},
	{"agent root, [verifier] system_state (its container, restarted)", "version = \"1.0\"\n[agent]\nuser = \"root\"\n[verifier]\nsystem_state = true\n", true},
}

// TestTaskRewardHacks runs every attack on every kind of task, against
// the real Docker daemon, and checks that the attack scores 0 (where the
// verifier does not trust the agent's tools), that the oracle's fix
// scores 1, and that docs/tasks.md's table is the one these runs give.
func TestTaskRewardHacks(t *testing.T) {
	e := engine(t)
	inject, err := os.ReadFile("testdata/inject_idle.py")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	scores := map[string]map[string]float64{}
	oracle := map[string]float64{}
	sem := make(chan struct{}, 3)
	before := taskContainers(t)
	t.Run("kinds", func(t *testing.T) {
		for _, k := range taskKinds {
			tk := edit(t, generated(t, 1, 5)[0], map[string]string{"task.toml": k.toml})
			solve, err := os.ReadFile(tk.Dir + "/solution/solve.sh")
			if err != nil {
				t.Fatal(err)
			}
			rows := append([]struct{ name, script string }{{"", string(solve)}}, taskHacks...)
			for _, h := range rows {
				name := k.name + "/" + h.name
				if h.name == "" {
					name = k.name + "/the oracle's fix"
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					sem <- struct{}{}
					defer func() { <-sem }()
					v, out := attack(t, e, tk, h.script, inject)
					t.Logf("reward %v, %v; the attack printed %q", v.Reward, v.Info["reward_error"], out)
					mu.Lock()
					defer mu.Unlock()
					if h.name == "" {
						oracle[k.name] = v.Reward
						if v.Reward != 1 {
							t.Errorf("the oracle's fix scores %v: %v", v.Reward, v.Info)
						}
						return
					}
					if scores[h.name] == nil {
						scores[h.name] = map[string]float64{}
					}
					scores[h.name][k.name] = v.Reward
					if v.Reward != 0 && !k.trusts {
						t.Errorf("an agent that fixed nothing scores %v: %v", v.Reward, v.Info)
					}
				})
			}
		}
	})
	if after := taskContainers(t); after != before {
		t.Errorf("%d task containers before, %d after", before, after)
	}
	checkTaskHackTable(t, scores, oracle)
}

// attack opens an episode of tk, runs script as the agent, then the
// verifier.
func attack(t *testing.T, e *harbor.Engine, tk *harbor.Task, script string, inject []byte) (harbor.Verdict, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	run, err := e.Open(ctx, tk)
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	if err := run.WS.CopyIn(ctx, "/tmp", []sandbox.File{{Name: "inject_idle.py", Mode: 0o755, Data: inject}}); err != nil {
		t.Fatal(err)
	}
	res, err := run.WS.Exec(ctx, sandbox.ExecRequest{Command: []string{"bash", "-c", script}, Dir: run.WorkDir,
		Limits: sandbox.Limits{WallTime: time.Minute, CPUTime: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // what the attack left running gets going
	v, err := run.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return v, strings.TrimSpace(string(res.Stdout) + string(res.Stderr))
}

const (
	taskHacksBegin = "<!-- task-hacks:begin (generated by go test ./pkg/tasks/harbor -run TestTaskRewardHacks -update) -->"
	taskHacksEnd   = "<!-- task-hacks:end -->"
)

func checkTaskHackTable(t *testing.T, scores map[string]map[string]float64, oracle map[string]float64) {
	var b strings.Builder
	b.WriteString("| the agent (fixing nothing) |")
	for _, k := range taskKinds {
		b.WriteString(" " + k.name + " |")
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(taskKinds)) + "\n")
	b.WriteString("| *the oracle's fix* |")
	for _, k := range taskKinds {
		s, ok := oracle[k.name]
		if !ok {
			return // a subtest was skipped (go test -run): nothing to compare
		}
		fmt.Fprintf(&b, " *%g* |", s)
	}
	b.WriteString("\n")
	for _, h := range taskHacks {
		b.WriteString("| " + strings.ReplaceAll(h.name, "|", `\|`) + " |")
		for _, k := range taskKinds {
			s, ok := scores[h.name][k.name]
			if !ok {
				return
			}
			fmt.Fprintf(&b, " %g |", s)
		}
		b.WriteString("\n")
	}
	const path = "../../../docs/tasks.md"
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i, j := strings.Index(doc, taskHacksBegin), strings.Index(doc, taskHacksEnd)
	if i < 0 || j < i {
		t.Fatalf("docs/tasks.md lacks the markers %q ... %q", taskHacksBegin, taskHacksEnd)
	}
	want := b.String()
	if doc[i+len(taskHacksBegin)+1:j] == want {
		return
	}
	if !*updateDocs {
		t.Fatalf("docs/tasks.md's reward-hacking table is out of date; run go test ./pkg/tasks/harbor -run TestTaskRewardHacks -update\n%s", want)
	}
	doc = doc[:i+len(taskHacksBegin)+1] + want + doc[j:]
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
}
