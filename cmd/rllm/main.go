// Command rllm trains LLM agents with reinforcement learning.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	app := &App{
		Stdin:    os.Stdin,
		Stdout:   os.Stdout,
		Stderr:   os.Stderr,
		Getenv:   os.Getenv,
		Environ:  os.Environ,
		ReadFile: os.ReadFile,
	}
	os.Exit(app.Run(ctx, os.Args[1:]))
}
