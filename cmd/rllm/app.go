package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/rllm-org/rllm-go/pkg/registry"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// App carries everything a command may touch of the outside world, so that
// tests run commands without os.* (k6's habit).
type App struct {
	Stdin   io.Reader
	Stdout  io.Writer
	Stderr  io.Writer
	Getenv  func(string) string
	Environ func() []string
	// ReadFile reads user files (configs, datasets); nil means os.ReadFile.
	ReadFile func(string) ([]byte, error)
	// StderrIsTerminal chooses readable progress over JSON lines.
	StderrIsTerminal bool

	// output is the --output flag: auto, text or json.
	output string
	// log is the one logger for diagnostics on stderr (see log.go).
	log *slog.Logger
	// ctx is Run's context, so reading user files stops on Ctrl-C.
	ctx context.Context

	// What the signal handler reads while the command runs (signals.go).
	sigMu      sync.Mutex
	cmdPath    string        // the running command
	jsonStderr bool          // stderr is JSON lines
	undone     func() string // what the clean stop is doing, if the command says
}

// context is Run's context (Background outside Run).
func (a *App) context() context.Context {
	if a.ctx == nil {
		return context.Background()
	}
	return a.ctx
}

// Output formats of --output.
const (
	outputAuto = "auto"
	outputText = "text"
	outputJSON = "json"
)

// streamsEvents are the commands whose events on stderr are JSON lines
// off a terminal even without --output json (what train has always done).
var streamsEvents = map[string]bool{"rllm train": true}

// outputFileFlag tells a user who typed -o FILE where a file name goes.
var outputFileFlag = map[string]string{
	"rllm eval":          "--episodes %[1]s keeps the episodes; to keep the report, redirect stdout (> %[1]s)",
	"rllm data generate": "the dataset file goes in --out %[1]s",
	"rllm plot":          "the charts' directory goes in --out %[1]s",
	"rllm sft":           "--out DIR saves the checkpoint; to keep the loss lines, redirect stdout (> %[1]s)",
}

// jsonResults reports whether results on stdout are JSON.
func (a *App) jsonResults() bool { return a.output == outputJSON }

// resultFormat is the format of a command's results on stdout: json with
// --output json, else the command's own text format (text, yaml).
func (a *App) resultFormat(text string) string {
	if a.jsonResults() {
		return outputJSON
	}
	return text
}

// jsonEvents reports whether events and diagnostics on stderr are JSON
// lines for cmd: with --output json always, with the default for the
// commands that stream events when stderr is not a terminal.
func (a *App) jsonEvents(cmd *cobra.Command) bool {
	switch a.output {
	case outputJSON:
		return true
	case outputAuto, "":
		return cmd != nil && streamsEvents[cmd.CommandPath()] && !a.StderrIsTerminal
	}
	return false
}

// logger is the diagnostics logger (text until the flags are parsed).
func (a *App) logger() *slog.Logger {
	if a.log == nil {
		a.log = newLogger(a.Stderr, a.output == outputJSON)
	}
	return a.log
}

// notef, warnf and infof log one diagnostic line.
func (a *App) notef(format string, args ...any) {
	logf(a.logger(), slog.LevelInfo, "note: "+fmt.Sprintf(format, args...))
}

func (a *App) infof(format string, args ...any) {
	logf(a.logger(), slog.LevelInfo, fmt.Sprintf(format, args...))
}

func (a *App) warnf(format string, args ...any) {
	logf(a.logger(), slog.LevelWarn, fmt.Sprintf(format, args...))
}

// usagef is a command-line mistake: exit code 2.
func usagef(format string, args ...any) error { return usererr.Errorf(format, args...) }

// Run executes the command line and returns the process exit code.
func (a *App) Run(ctx context.Context, args []string) int {
	a.ctx = ctx
	// The logger, the progress printer and the envs' relayed lines all
	// write to stderr from their own goroutines: one lock for them all
	// (a test's buffer is not safe for concurrent writes; os.Stderr is).
	if a.Stderr != nil {
		orig := a.Stderr
		a.Stderr = &lockedWriter{w: orig}
		defer func() { a.Stderr = orig }()
	}
	defer packageLoggers()()
	// Errors before the flags are parsed (an unknown command) must already
	// honour --output json.
	root := newRootCmd(a)
	a.output = scanOutput(args)
	a.log = nil
	root.SetArgs(args)
	root.SetIn(a.Stdin)
	root.SetOut(a.Stdout)
	root.SetErr(a.Stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return usererr.ExitOK
	}
	err = cobraError(root, cmd, err)
	code := usererr.ExitCode(ctx, err)
	msg := err.Error()
	if code == usererr.ExitInterrupted && msg == context.Canceled.Error() {
		msg = "interrupted"
	}
	// Configuration errors come several at once, one per line.
	for _, line := range strings.Split(msg, "\n") {
		logExit(a.logger(), code, line)
	}
	return code
}

// scanOutput finds --output's value in args the way the flag parser will,
// for errors that happen before it runs.
func scanOutput(args []string) string {
	for i, arg := range args {
		switch {
		case arg == "--":
			return outputAuto
		case arg == "--output" || arg == "-o":
			if i+1 < len(args) {
				return args[i+1]
			}
		case strings.HasPrefix(arg, "--output="):
			return strings.TrimPrefix(arg, "--output=")
		case strings.HasPrefix(arg, "-o") && !strings.HasPrefix(arg, "--"):
			return strings.TrimPrefix(strings.TrimPrefix(arg, "-o"), "=")
		}
	}
	return outputAuto
}

var unknownCommand = regexp.MustCompile(`^unknown command "(.*)" for "(.*)"`)

// cobraError turns cobra's own errors into one line with a fix, exit 2.
func cobraError(root, cmd *cobra.Command, err error) error {
	if m := unknownCommand.FindStringSubmatch(err.Error()); m != nil {
		parent := root
		if c, _, ferr := root.Find(strings.Fields(m[2])[1:]); ferr == nil {
			parent = c
		}
		var names []string
		for _, c := range parent.Commands() {
			if c.IsAvailableCommand() {
				names = append(names, c.Name())
				names = append(names, c.Aliases...)
			}
		}
		if s := registry.Suggest(m[1], names); s != "" {
			return usererr.Errorf("unknown command %q for %s; did you mean %q?", m[1], m[2], s)
		}
		return usererr.Errorf("unknown command %q for %s; %s --help lists the commands", m[1], m[2], m[2])
	}
	return err
}

func newRootCmd(a *App) *cobra.Command {
	root := &cobra.Command{
		Use:                "rllm",
		Short:              "Train LLM agents with reinforcement learning",
		Version:            versionLine(),
		SilenceUsage:       true,
		SilenceErrors:      true,
		DisableSuggestions: true, // cobraError suggests, on one line
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(cmd, a.output); err != nil {
				return err
			}
			a.log = newLogger(a.Stderr, a.jsonEvents(cmd))
			usePackageLoggers(a.log)
			a.sigMu.Lock()
			a.cmdPath, a.jsonStderr = cmd.CommandPath(), a.jsonEvents(cmd)
			a.sigMu.Unlock()
			return nil
		},
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.PersistentFlags().StringVarP(&a.output, "output", "o", outputAuto,
		"output `FORMAT`: text or json (json: every line on stdout and stderr is one JSON object); auto is text, except train's events off a terminal")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{outputText, outputJSON}, cobra.ShellCompDirectiveNoFileComp))
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usererr.Errorf("%v; %s --help lists the flags", err, c.CommandPath())
	})
	root.AddCommand(
		newServeCmd(a),
		newGatewayCmd(a),
		newSFTCmd(a),
		newTrainCmd(a),
		newValidateConfigCmd(a),
		newGroupCmd("config", "Inspect the resolved configuration", newConfigShowCmd(a)),
		newTokenizeCmd(a),
		newVersionCmd(a),
		newListCmd(a),
		newGroupCmd("data", "Work with datasets", newDataGenerateCmd(a)),
		newEvalCmd(a),
		newPlotCmd(a),
		newViewCmd(a),
		newGroupCmd("tools", "List and call the tools a run offers the model (tools.builtin, tools.mcp)", newToolsListCmd(a), newToolsCallCmd(a)),
		newGroupCmd("env", "Work with environments", newEnvPlayCmd(a)),
		newDatasetCmd(a),
		newTasksCmd(a),
		newExportCmd(a),
		newHarnessCmd(a),
	)
	return root
}

// newGroupCmd builds a command that only groups others (config, data,
// dataset, env, tools). It refuses an unknown subcommand, as the root
// does, instead of printing its help and exiting 0.
func newGroupCmd(use, short string, subs ...*cobra.Command) *cobra.Command {
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			return cmd.Help()
		},
	}
	cmd.AddCommand(subs...)
	return cmd
}

// checkOutput validates --output for cmd; a file name gets a pointer to
// the flag that takes one.
func checkOutput(cmd *cobra.Command, v string) error {
	switch v {
	case outputAuto, outputText, outputJSON:
		return nil
	case "yaml":
		if cmd.CommandPath() == "rllm config show" {
			return nil // its text is YAML; kept from before --output was shared
		}
	}
	fix := "to keep the output, redirect stdout (> " + v + ")"
	if f, ok := outputFileFlag[cmd.CommandPath()]; ok {
		fix = fmt.Sprintf(f, v)
	}
	if strings.ContainsAny(v, "./\\") {
		return usererr.Errorf("--output %q: --output chooses the format, text or json, not a file; %s", v, fix)
	}
	return usererr.Errorf("--output %q: use text or json", v)
}

// Exit codes, as pkg/usererr defines them.
const (
	exitOK          = usererr.ExitOK
	exitFailure     = usererr.ExitFailure
	exitUsage       = usererr.ExitUsage
	exitInterrupted = usererr.ExitInterrupted
)

// lockedWriter serializes the writes of several goroutines to one writer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
