package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rllm-org/rllm-go/pkg/env"
	envexec "github.com/rllm-org/rllm-go/pkg/env/exec"
	"github.com/rllm-org/rllm-go/pkg/episode"
)

type envPlayOptions struct {
	config configFlags
	task   string
}

func newEnvPlayCmd(a *App) *cobra.Command {
	opts := &envPlayOptions{}
	cmd := &cobra.Command{
		Use:   "play [key=value ...] --task JSON",
		Short: "Drive one episode of the configured env by hand: actions from stdin, observations as JSON lines",
		Long: `Reset the env (env.name, env.args) with one task row, then read actions
from stdin, one per line, and print what the env answers, one JSON line
each: {"observation": ..., "reward": ..., "done": ..., "info": ...}. The
first line is the reset's observation. The episode ends when the env says
done or stdin ends. An env that crashes, hangs past its timeout or breaks
its protocol ends the command with a non-zero exit and a line saying what
it did: the tool an environment author debugs with.`,
		Example: `  rllm env play env.name=exec env.args.command=[python3,guess_env.py] --task '{"secret": 7}'
  rllm env play env.name=frozenlake --task '{"seed": 3}' < moves.txt`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runEnvPlay(cmd.Context(), a, opts, args)
		},
		ValidArgsFunction: completeConfigKeys,
	}
	opts.config.register(cmd)
	cmd.Flags().StringVar(&opts.task, "task", "{}", "the task row, a JSON object")
	return cmd
}

type playLine struct {
	Observation any            `json:"observation"`
	Reward      *float64       `json:"reward"`
	Done        bool           `json:"done"`
	Info        map[string]any `json:"info,omitempty"`
}

func runEnvPlay(ctx context.Context, a *App, opts *envPlayOptions, args []string) (err error) {
	var task episode.Task
	if err := json.Unmarshal([]byte(opts.task), &task); err != nil || task == nil {
		return usagef("--task must be a JSON object (a task row), e.g. --task '{\"question\": \"2+2\"}'; got %q", opts.task)
	}
	ld, err := opts.config.load(a, args)
	if err != nil {
		return err
	}
	c := ld.Config
	if _, _, err := env.Resolve(c.Env.Name, c.Env.Args); err != nil {
		return withOrigins(ld, err)
	}
	e, err := env.New(c.Env.Name, task, c.Env.Args)
	if err != nil {
		return withOrigins(ld, err)
	}
	defer envexec.CloseAll()
	defer func() {
		if cerr := e.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("env %s: closing: %w", c.Env.Name, cerr)
		}
	}()
	enc := json.NewEncoder(a.Stdout)
	enc.SetEscapeHTML(false)
	obs, info, err := e.Reset(ctx)
	if err != nil {
		return fmt.Errorf("env %s: reset failed: %w", c.Env.Name, err)
	}
	if err := enc.Encode(playLine{Observation: obs, Info: info}); err != nil {
		return err
	}
	lines := make(chan string)
	readErr := make(chan error, 1)
	stdin := a.Stdin
	if stdin == nil {
		stdin = strings.NewReader("") // no input: the episode ends at reset
	}
	go func() {
		sc := bufio.NewScanner(stdin)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
		if err := sc.Err(); err != nil && err != io.EOF {
			readErr <- err
		}
		close(lines)
	}()
	for {
		var line string
		var ok bool
		select {
		case line, ok = <-lines:
		case err := <-readErr:
			return fmt.Errorf("reading actions from stdin: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		}
		if !ok {
			return nil
		}
		res, err := e.Step(ctx, episode.Action{Content: line})
		if err != nil {
			return fmt.Errorf("env %s: step failed: %w", c.Env.Name, err)
		}
		r := res.Reward
		if err := enc.Encode(playLine{Observation: res.Observation, Reward: &r, Done: res.Done, Info: res.Info}); err != nil {
			return err
		}
		if res.Done {
			return nil
		}
	}
}
