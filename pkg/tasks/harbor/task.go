// Package harbor reads tasks in the Harbor task format (the format rLLM
// runs SWE-bench Verified, Terminal-Bench, SWE-smith and R2E-Gym from) and
// runs them in containers: env.name=task runs an agent in the task's
// container (as an unprivileged user unless the task asks for root), then
// the task's verifier out of the agent's reach (the container restarted,
// or after a root agent a fresh container with the agent's working
// directory copied in), and takes the reward the verifier writes.
//
// A task is a directory:
//
//	instruction.md        the prompt
//	task.toml             timeouts, CPUs, memory, storage (Config)
//	environment/          the image's build context: a Dockerfile (or
//	                      [environment] docker_image in task.toml)
//	tests/test.sh         the verifier, run after the agent; it writes
//	                      /logs/verifier/reward.txt (a number) or reward.json
//	solution/solve.sh     the oracle (optional)
//
// A dataset of tasks is a directory of such directories (or one task
// directory): data.train_files=[path/to/tasks]; each row names its task's
// directory (column task_dir).
package harbor

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"

	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// The files of a task directory.
const (
	InstructionFile = "instruction.md"
	ConfigFile      = "task.toml"
	EnvironmentDir  = "environment"
	TestsDir        = "tests"
	TestScript      = "tests/test.sh"
	SolutionDir     = "solution"
	SolveScript     = "solution/solve.sh"
)

// Defaults of task.toml's keys, Harbor's own.
const (
	DefaultAgentTimeout    = 600 * time.Second
	DefaultVerifierTimeout = 600 * time.Second
	DefaultBuildTimeout    = 600 * time.Second
	DefaultCPUs            = 1.0
	DefaultMemoryMB        = 2048
	DefaultStorageMB       = 10240
)

// maxInstructionBytes bounds instruction.md.
const maxInstructionBytes = 1 << 20

// Config is what rllm reads of task.toml; every other key is kept in Raw.
type Config struct {
	// Version is the old layout's version ("1.0"), SchemaVersion the
	// newer one's schema_version; either may be empty.
	Version       string
	SchemaVersion string
	// Name is [task] name (newer layout), empty in the old one.
	Name string
	// AgentTimeout is [agent] timeout_sec: how long the agent may work.
	AgentTimeout time.Duration
	// VerifierTimeout is [verifier] timeout_sec.
	VerifierTimeout time.Duration
	// VerifierEnv is [verifier.env]: the verifier's environment.
	VerifierEnv map[string]string
	// AgentUser is [agent] user (Harbor's key; a name or a UID): who
	// the agent runs as. Empty: an unprivileged user of rllm's
	// (DefaultAgentUser) when the image's USER is root, else the image's
	// USER. "root" (or 0) is root, and its work is verified in a fresh
	// container.
	AgentUser string
	// VerifierUser is [verifier] user (Harbor's key): who the verifier
	// runs as; empty is the image's USER.
	VerifierUser string
	// SystemState is [verifier] system_state (rllm's key): the verifier
	// checks the agent's container (packages installed, services,
	// files outside the working directory), so it runs there, restarted,
	// with whatever tools the agent left, even when the agent is root.
	SystemState bool
	// BuildTimeout is [environment] build_timeout_sec.
	BuildTimeout time.Duration
	// DockerImage is [environment] docker_image: an image used instead
	// of building environment/Dockerfile.
	DockerImage string
	// CPUs, MemoryMB and StorageMB are [environment] cpus, memory_mb (or
	// the older memory = "2G") and storage_mb (or storage = "10G").
	CPUs      float64
	MemoryMB  int64
	StorageMB int64
	// Env is [environment.env]: every command's environment in the
	// container.
	Env map[string]string
	// SolutionEnv is [solution.env]: the oracle's environment.
	SolutionEnv map[string]string
	// Raw is the whole file, decoded.
	Raw map[string]any
}

// Task is one task directory, read.
type Task struct {
	// Dir is the task's directory (absolute).
	Dir string
	// Name is [task] name, else the directory's name.
	Name        string
	Instruction string
	Config      Config
	// Dockerfile is environment/Dockerfile when the task builds its
	// image ("" with docker_image).
	Dockerfile string
	// HasSolution reports a solution/solve.sh.
	HasSolution bool
}

// fileErr is a user error naming file (and line when > 0) and the fix.
func fileErr(file string, line int, fix, format string, args ...any) error {
	subject := file
	if line > 0 {
		subject = fmt.Sprintf("%s:%d", file, line)
	}
	return &usererr.Error{Subject: subject, Msg: fmt.Sprintf(format, args...), Fix: fix}
}

// Load reads the task in dir. Whatever is missing or malformed is one
// user error naming the file (and line) and the fix.
func Load(dir string) (*Task, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if st, err := os.Stat(abs); err != nil || !st.IsDir() {
		return nil, fileErr(dir, 0, "give a task directory (instruction.md, task.toml, environment/, tests/test.sh)", "is not a directory")
	}
	t := &Task{Dir: abs, Name: filepath.Base(abs)}
	ins := filepath.Join(abs, InstructionFile)
	b, err := readBounded(ins, maxInstructionBytes)
	if err != nil {
		return nil, fileErr(ins, 0, "write the task's prompt there", "cannot be read: %v", plainErr(err))
	}
	if strings.TrimSpace(string(b)) == "" {
		return nil, fileErr(ins, 0, "write the task's prompt there", "is empty")
	}
	t.Instruction = string(b)
	cfgPath := filepath.Join(abs, ConfigFile)
	data, err := readBounded(cfgPath, 1<<20)
	if err != nil {
		return nil, fileErr(cfgPath, 0, `write one (at least version = "1.0")`, "cannot be read: %v", plainErr(err))
	}
	if t.Config, err = ParseConfig(cfgPath, data); err != nil {
		return nil, err
	}
	if t.Config.Name != "" {
		t.Name = t.Config.Name
	}
	test := filepath.Join(abs, TestScript)
	if st, err := os.Stat(test); err != nil || !st.Mode().IsRegular() {
		return nil, fileErr(test, 0, "write the verifier there: a script that writes the reward to /logs/verifier/reward.txt", "is missing")
	}
	if t.Config.DockerImage == "" {
		df := filepath.Join(abs, EnvironmentDir, "Dockerfile")
		if st, err := os.Stat(df); err != nil || !st.Mode().IsRegular() {
			return nil, fileErr(df, 0, "write the image's Dockerfile there, or name an image in task.toml's [environment] docker_image", "is missing")
		}
		t.Dockerfile = df
	}
	if st, err := os.Stat(filepath.Join(abs, SolveScript)); err == nil && st.Mode().IsRegular() {
		t.HasSolution = true
	}
	return t, nil
}

func plainErr(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// readBounded reads at most max bytes of a file; a longer file is an
// error.
func readBounded(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	if st.Size() > max {
		return nil, fmt.Errorf("larger than %d bytes", max)
	}
	b := make([]byte, st.Size())
	_, err = readFull(f, b)
	return b, err
}

func readFull(f *os.File, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := f.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// ParseConfig reads task.toml's content (file names it in errors). Both
// layouts are read: the old one (version = "1.0", tables [metadata],
// [verifier], [agent], [environment]) and the newer one (schema_version
// and a [task] table). Unknown keys are kept; what contradicts what rllm
// can run is refused: a wrong type, a negative or zero timeout, GPUs.
func ParseConfig(file string, data []byte) (Config, error) {
	c := Config{AgentTimeout: DefaultAgentTimeout, VerifierTimeout: DefaultVerifierTimeout, BuildTimeout: DefaultBuildTimeout,
		CPUs: DefaultCPUs, MemoryMB: DefaultMemoryMB, StorageMB: DefaultStorageMB}
	if err := toml.Unmarshal(data, &c.Raw); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, _ := de.Position()
			return c, fileErr(file, row, "write valid TOML (key = value under [table] headers)", "is not valid TOML: %s", de.Error())
		}
		return c, fileErr(file, 0, "write valid TOML", "is not valid TOML: %v", err)
	}
	r := reader{file: file, text: string(data)}
	c.Version = r.str(c.Raw, "", "version")
	c.SchemaVersion = r.str(c.Raw, "", "schema_version")
	if task := r.table(c.Raw, "", "task"); task != nil {
		c.Name = r.str(task, "task", "name")
	}
	if a := r.table(c.Raw, "", "agent"); a != nil {
		r.seconds(a, "agent", "timeout_sec", &c.AgentTimeout)
		c.AgentUser = r.user(a, "agent", "user")
	}
	if v := r.table(c.Raw, "", "verifier"); v != nil {
		r.seconds(v, "verifier", "timeout_sec", &c.VerifierTimeout)
		c.VerifierEnv = r.env(v, "verifier", "env")
		c.VerifierUser = r.user(v, "verifier", "user")
		if b, ok := v["system_state"]; ok {
			if c.SystemState, ok = b.(bool); !ok {
				r.fail("verifier", "system_state", "write true (the verifier checks the agent's container) or false", "is a %s, not a boolean", kind(b))
			}
		}
	}
	if s := r.table(c.Raw, "", "solution"); s != nil {
		c.SolutionEnv = r.env(s, "solution", "env")
	}
	if e := r.table(c.Raw, "", "environment"); e != nil {
		r.seconds(e, "environment", "build_timeout_sec", &c.BuildTimeout)
		c.DockerImage = r.str(e, "environment", "docker_image")
		if v, ok := e["cpus"]; ok {
			n, ok := number(v)
			if !ok || n <= 0 || n > 1024 {
				r.fail("environment", "cpus", "set a positive number of CPUs (1, 2, 0.5)", "is %v", v)
			} else {
				c.CPUs = n
			}
		}
		r.megabytes(e, "memory_mb", "memory", &c.MemoryMB)
		r.megabytes(e, "storage_mb", "storage", &c.StorageMB)
		if v, ok := e["gpus"]; ok {
			if n, ok := number(v); !ok || n != 0 {
				r.fail("environment", "gpus", "run the task where GPUs are (rllm's containers have none), or set gpus = 0", "asks for %v GPUs", v)
			}
		}
		c.Env = r.env(e, "environment", "env")
	}
	return c, r.err
}

// reader reads typed keys out of the decoded document, remembering the
// first mistake with its line.
type reader struct {
	file string
	text string
	err  error
}

func (r *reader) fail(table, key, fix, format string, args ...any) {
	if r.err != nil {
		return
	}
	name := key
	if table != "" {
		name = table + "." + key
	}
	r.err = fileErr(r.file, keyLine(r.text, table, key), fix, "%s %s", name, fmt.Sprintf(format, args...))
}

func (r *reader) table(m map[string]any, table, key string) map[string]any {
	v, ok := m[key]
	if !ok {
		return nil
	}
	t, ok := v.(map[string]any)
	if !ok {
		r.fail(table, key, "write it as a table ["+key+"]", "is a %s, not a table", kind(v))
		return nil
	}
	return t
}

func (r *reader) str(m map[string]any, table, key string) string {
	v, ok := m[key]
	if !ok {
		return ""
	}
	switch s := v.(type) {
	case string:
		return s
	case int64, float64:
		return fmt.Sprint(s) // version = 1.0
	}
	r.fail(table, key, "write it as a string", "is a %s", kind(v))
	return ""
}

// user reads a user key: a name, or a UID (a number, as UID:UID).
func (r *reader) user(m map[string]any, table, key string) string {
	v, ok := m[key]
	if !ok {
		return ""
	}
	switch u := v.(type) {
	case int64:
		if u >= 0 && u < 1<<31 {
			return fmt.Sprintf("%d:%d", u, u)
		}
	case string:
		if u != "" && !strings.ContainsAny(u, " \t\n\x00") {
			return u
		}
	}
	r.fail(table, key, `name a user of the image ("root", "app") or give a UID (1000)`, "is %v", fmtValue(v))
	return ""
}

func (r *reader) seconds(m map[string]any, table, key string, out *time.Duration) {
	v, ok := m[key]
	if !ok {
		return
	}
	n, ok := number(v)
	if !ok || n <= 0 || n > 7*24*3600 || math.IsNaN(n) {
		r.fail(table, key, "set a positive number of seconds (600, 1800.0)", "is %v", fmtValue(v))
		return
	}
	*out = time.Duration(n * float64(time.Second))
}

// megabytes reads key (a number of MB) or the older oldKey ("2G",
// "512M", "1024" MB).
func (r *reader) megabytes(m map[string]any, key, oldKey string, out *int64) {
	if v, ok := m[key]; ok {
		n, ok := number(v)
		if !ok || n <= 0 || n > 1<<30 {
			r.fail("environment", key, "set a positive number of megabytes (2048)", "is %v", fmtValue(v))
			return
		}
		*out = int64(n)
		return
	}
	v, ok := m[oldKey]
	if !ok {
		return
	}
	n, err := parseSize(v)
	if err != nil {
		r.fail("environment", oldKey, fmt.Sprintf(`write a size such as "2G" or "512M", or %s = a number of megabytes`, key), "is %v: %v", fmtValue(v), err)
		return
	}
	*out = n
}

func (r *reader) env(m map[string]any, table, key string) map[string]string {
	t := r.table(m, table, key)
	if t == nil {
		return nil
	}
	out := make(map[string]string, len(t))
	for k, v := range t {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			r.fail(table+"."+key, k, "name environment variables with letters, digits and _", "is not an environment variable name")
			continue
		}
		switch s := v.(type) {
		case string:
			out[k] = s
		case int64, float64, bool:
			out[k] = fmt.Sprint(s)
		default:
			r.fail(table+"."+key, k, "give the variable a string value", "is a %s", kind(v))
		}
	}
	return out
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case float64:
		return n, !math.IsNaN(n) && !math.IsInf(n, 0)
	}
	return 0, false
}

func fmtValue(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprint(v)
}

func kind(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case int64, float64:
		return "number"
	case bool:
		return "boolean"
	case map[string]any:
		return "table"
	case []any:
		return "array"
	}
	return fmt.Sprintf("%T", v)
}

var sizeRE = regexp.MustCompile(`^\s*([0-9]+(?:\.[0-9]+)?)\s*([kKmMgGtT]?)(?:[iI]?[bB]?)\s*$`)

// parseSize reads "2G", "512M", "1.5GB", "2Gi" (binary units) or a bare
// number of megabytes, as megabytes.
func parseSize(v any) (int64, error) {
	if n, ok := number(v); ok {
		if n <= 0 {
			return 0, errors.New("not positive")
		}
		return int64(n), nil
	}
	s, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("a %s, not a size", kind(v))
	}
	m := sizeRE.FindStringSubmatch(s)
	if m == nil {
		return 0, errors.New("not a size")
	}
	n, err := strconv.ParseFloat(m[1], 64)
	if err != nil || n <= 0 {
		return 0, errors.New("not a positive size")
	}
	switch strings.ToUpper(m[2]) {
	case "K":
		n /= 1024
	case "", "M":
	case "G":
		n *= 1024
	case "T":
		n *= 1024 * 1024
	}
	if n < 1 || n > 1<<30 {
		return 0, errors.New("out of range")
	}
	return int64(math.Ceil(n)), nil
}

var headerRE = regexp.MustCompile(`^\s*\[\s*([^\]\[]+?)\s*\]\s*(#.*)?$`)

// keyLine finds the line of key in table ("" is the top level; a dotted
// table such as verifier.env) of a TOML text, for messages; 0 when not
// found (a key in an inline table, a dotted key).
func keyLine(text, table, key string) int {
	cur := ""
	keyRE := regexp.MustCompile(`^\s*"?` + regexp.QuoteMeta(key) + `"?\s*=`)
	for i, line := range strings.Split(text, "\n") {
		if m := headerRE.FindStringSubmatch(line); m != nil {
			cur = strings.ReplaceAll(m[1], " ", "")
			continue
		}
		if cur == table && keyRE.MatchString(line) {
			return i + 1
		}
	}
	return 0
}

// LoadAll reads the tasks of dir: dir itself when it is a task (it holds
// task.toml), else each of its subdirectories that holds task.toml or
// instruction.md, sorted by name. Every broken task is reported, one line
// each; a directory with no task is an error.
func LoadAll(dir string) ([]*Task, error) {
	if isTaskDir(dir) {
		t, err := Load(dir)
		if err != nil {
			return nil, err
		}
		return []*Task{t}, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fileErr(dir, 0, "give a directory of tasks", "cannot be read: %v", plainErr(err))
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() && isTaskDir(filepath.Join(dir, e.Name())) {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return nil, fileErr(dir, 0, "give a task directory, or a directory of them (each with instruction.md, task.toml, environment/, tests/test.sh)", "holds no task")
	}
	var tasks []*Task
	var errs []error
	for _, n := range names {
		t, err := Load(filepath.Join(dir, n))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		tasks = append(tasks, t)
	}
	return tasks, errors.Join(errs...)
}

// IsTaskDir reports whether dir looks like a task (task.toml or
// instruction.md), or a directory of tasks.
func IsTaskDir(dir string) bool {
	if isTaskDir(dir) {
		return true
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if e.IsDir() && isTaskDir(filepath.Join(dir, e.Name())) {
			return true
		}
	}
	return false
}

func isTaskDir(dir string) bool {
	for _, f := range []string{ConfigFile, InstructionFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			return true
		}
	}
	return false
}
