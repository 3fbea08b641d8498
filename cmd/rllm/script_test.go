package main

import (
	"context"
	"os"
	"os/signal"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestMain lets testscript run this binary as the `rllm` command, so the
// .txtar scripts exercise the CLI exactly as a user types it.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"rllm": func() {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			app := &App{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
				Getenv: os.Getenv, Environ: os.Environ, ReadFile: os.ReadFile}
			os.Exit(app.Run(ctx, os.Args[1:]))
		},
	})
}

func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: true,
	})
}
