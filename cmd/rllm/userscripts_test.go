package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/dataset"
	"github.com/rllm-org/rllm-go/pkg/dataset/catalog"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/tasks/harbor"
)

var updateUserScripts = flag.Bool("update", false, "rewrite the table of users' training scripts in docs/config.md")

// userScript is one of testdata/userscripts: the Hydra overrides a real
// rLLM or verl training script hands its entry point, what the entry
// point chooses in Python, and the datasets the script reads.
type userScript struct {
	name, source string
	overrides    []string // as the script wrote them
	run          []string // the entry point's choices, as rllm is told them
	data         []scriptData
}

type scriptData struct {
	ref  string // a registered dataset name:split, or a file path
	rows int
}

func readUserScript(t *testing.T, path string) userScript {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := userScript{name: strings.TrimSuffix(filepath.Base(path), ".txt")}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "# source: "):
			s.source = strings.TrimPrefix(line, "# source: ")
		case strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "":
		case strings.HasPrefix(line, "+ "):
			s.run = append(s.run, line[2:])
		case strings.HasPrefix(line, "= "):
			ref, n, ok := strings.Cut(line[2:], " ")
			rows, err := strconv.Atoi(n)
			if !ok || err != nil {
				t.Fatalf("%s: bad data line %q", path, line)
			}
			s.data = append(s.data, scriptData{ref, rows})
		default:
			s.overrides = append(s.overrides, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if s.source == "" || len(s.overrides) == 0 {
		t.Fatalf("%s names no source or no overrides", path)
	}
	return s
}

// prepare makes the datasets a script reads under dir: files at their
// paths, registered names in the registry at dir/datasets. Each row is a
// question with a ground truth, the columns rLLM's datasets carry.
func (s userScript) prepare(t *testing.T, dir string, expand func(string) string) {
	t.Helper()
	cat, err := catalog.Open(filepath.Join(dir, "datasets"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range s.data {
		rows := make([]episode.Task, d.rows)
		for i := range rows {
			rows[i] = episode.Task{"question": fmt.Sprintf("What is %d + %d?", i, i+1), "ground_truth": strconv.Itoa(2*i + 1), "data_source": s.name}
		}
		if strings.Contains(d.ref, "/") {
			path := expand(d.ref)
			if !filepath.IsAbs(path) {
				path = filepath.Join(dir, path)
			}
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := dataset.Write(context.Background(), path, rows, dataset.WriteOptions{}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		name, split, _ := strings.Cut(d.ref, ":")
		file := filepath.Join(dir, name+"-"+split+".jsonl")
		if err := dataset.Write(context.Background(), file, rows, dataset.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cat.Register(context.Background(), name, split, file, false); err != nil {
			t.Fatal(err)
		}
	}
}

// scriptOutcome is what validate-config and train --dry-run made of one
// script.
type scriptOutcome struct {
	s                 userScript
	validate, dryRun  int
	noEffect, aliased int
	errs              []string // validate-config's errors
	agree             bool
}

var errorLineRE = regexp.MustCompile(`^rllm: (?:error: )?`)

// TestUserScripts runs every script of testdata/userscripts through
// rllm validate-config and rllm train --dry-run, as its user wrote it
// (with the entry point's choices), and checks that the two agree: the
// same exit code and the same errors. docs/config.md carries the table
// of outcomes (go test ./cmd/rllm -run TestUserScripts -update).
// userScriptEnv is the environment of a user who runs these scripts:
// one who logs to W&B (trainer.logger names wandb in most of them) has
// its key set (validate-config and --dry-run send nothing to W&B).
func userScriptEnv(k string) string {
	if k == "WANDB_API_KEY" {
		return "local-wandb-key-for-the-script-tests"
	}
	return ""
}

func TestUserScripts(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("testdata", "userscripts", "*.txt"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	// The table is the same on every machine: the Docker client finds no
	// daemon (DOCKER_HOST names a socket nothing listens on), as on a
	// machine without Docker, whether or not this one has a daemon.
	// Validate-config still probes the daemon for real: env.name=task
	// is refused the way a user without Docker sees it.
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "no-docker.sock"))
	// An engine an earlier test opened against a real daemon would answer
	// instead; set it aside for this test.
	prev := harbor.SwapSharedEngine(nil)
	t.Cleanup(func() { harbor.SwapSharedEngine(prev) })
	var outcomes []scriptOutcome
	for _, p := range paths {
		p := filepath.Join(wd, p)
		s := readUserScript(t, p)
		dir := t.TempDir()
		vars := map[string]string{"HOME": filepath.Join(dir, "home"), "PWD": dir, "RLLM_DIR": filepath.Join(dir, "rllm")}
		expand := func(v string) string { return os.Expand(v, func(k string) string { return vars[k] }) }
		s.prepare(t, dir, expand)
		args := make([]string, 0, len(s.overrides)+len(s.run))
		for _, o := range append(slices.Clone(s.overrides), s.run...) {
			args = append(args, expand(o))
		}
		environ := []string{"RLLM_DATA__DATASETS_DIR=" + filepath.Join(dir, "datasets")}
		// The script runs where its user is ($PWD): relative data files
		// such as data/train.parquet are read from there.
		t.Chdir(dir)
		run := func(cmd ...string) (int, string) {
			var stdout, stderr bytes.Buffer
			a := &App{Stdout: &stdout, Stderr: &stderr, Environ: func() []string { return environ },
				Getenv: userScriptEnv, ReadFile: os.ReadFile}
			code := a.Run(context.Background(), append(append([]string{"-o", "text"}, cmd...), args...))
			return code, stderr.String()
		}
		o := scriptOutcome{s: s}
		var vOut, tOut string
		o.validate, vOut = run("validate-config")
		o.dryRun, tOut = run("train", "--dry-run")
		vErrs, vNotes := splitOutput(vOut)
		tErrs, tNotes := splitOutput(tOut)
		o.errs = vErrs
		o.agree = o.validate == o.dryRun && slices.Equal(vErrs, tErrs) && slices.Equal(vNotes, tNotes)
		for _, n := range vNotes {
			if m := regexp.MustCompile(`^note: these (\d+) keys`).FindStringSubmatch(n); m != nil {
				k, _ := strconv.Atoi(m[1])
				o.noEffect += k
			}
			if strings.Contains(n, " is the rLLM/verl name of ") {
				o.aliased++
			}
		}
		if !o.agree {
			t.Errorf("%s: validate-config (exit %d) and train --dry-run (exit %d) disagree:\n%s\n---\n%s", s.name, o.validate, o.dryRun, vOut, tOut)
		}
		for _, code := range []int{o.validate, o.dryRun} {
			if code != 0 && code != 2 {
				t.Errorf("%s: exit %d:\n%s", s.name, code, vOut+tOut)
			}
		}
		outcomes = append(outcomes, o)
	}
	t.Chdir(wd)
	checkUserScriptsDoc(t, userScriptsTable(outcomes))
}

// splitOutput separates the error lines of a command's stderr from its
// notes.
func splitOutput(stderr string) (errs, notes []string) {
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		l = errorLineRE.ReplaceAllString(l, "")
		switch {
		case l == "":
		case strings.HasPrefix(l, "note: "):
			notes = append(notes, l)
		default:
			errs = append(errs, l)
		}
	}
	return errs, notes
}

const (
	userScriptsBegin = "<!-- userscripts:begin (generated by go test ./cmd/rllm -run TestUserScripts -update) -->"
	userScriptsEnd   = "<!-- userscripts:end -->"
)

// refusedKeyRE finds the key an error names: "key: ..." or
// "file:line: key: ...".
var refusedKeyRE = regexp.MustCompile(`^(?:[^ ]+:\d+: )?([A-Za-z0-9_./-]+): `)

func userScriptsTable(outcomes []scriptOutcome) string {
	var b strings.Builder
	pass, agree, loggerOnly := 0, 0, 0
	for _, o := range outcomes {
		if o.validate == 0 && o.dryRun == 0 {
			pass++
		}
		if o.agree {
			agree++
		}
		if len(o.errs) > 0 && !slices.ContainsFunc(o.errs, func(e string) bool {
			return !strings.HasPrefix(e, "trainer.logger: ") || strings.Contains(e, "ui is rLLM's")
		}) {
			loggerOnly++
		}
	}
	fmt.Fprintf(&b, "%d of %d scripts pass both; validate-config and train --dry-run agree on %d of %d (same exit code, errors and notices). "+
		"%d more are refused only for a trainer.logger this build does not have (wandb).\n\n", pass, len(outcomes), agree, len(outcomes), loggerOnly)
	b.WriteString("| script | overrides | renamed | no effect | outcome | what refuses it |\n|---|---|---|---|---|---|\n")
	for _, o := range outcomes {
		outcome := "passes"
		if o.validate != 0 || o.dryRun != 0 {
			outcome = fmt.Sprintf("exit %d", o.validate)
		}
		var keys []string
		for _, e := range o.errs {
			k := e
			if m := refusedKeyRE.FindStringSubmatch(e); m != nil {
				k = m[1]
			} else if len(k) > 60 {
				k = k[:60] + "…"
			}
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
		refused := "—"
		if len(keys) > 0 {
			refused = "`" + strings.Join(keys, "`, `") + "`"
		}
		fmt.Fprintf(&b, "| [%s](%s) | %d | %d | %d | %s | %s |\n", o.s.name, o.s.source, len(o.s.overrides), o.aliased, o.noEffect, outcome, strings.ReplaceAll(refused, "|", `\|`))
	}
	return b.String()
}

func checkUserScriptsDoc(t *testing.T, want string) {
	t.Helper()
	const path = "../../docs/config.md"
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i, j := strings.Index(doc, userScriptsBegin), strings.Index(doc, userScriptsEnd)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the markers %q ... %q", path, userScriptsBegin, userScriptsEnd)
	}
	if doc[i+len(userScriptsBegin)+1:j] == want {
		return
	}
	if *updateUserScripts {
		if err := os.WriteFile(path, []byte(doc[:i+len(userScriptsBegin)+1]+want+doc[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("docs/config.md's table of users' scripts is out of date; run go test ./cmd/rllm -run TestUserScripts -update\nwant:\n%s", want)
}
