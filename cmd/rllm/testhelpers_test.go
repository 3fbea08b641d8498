package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// testExecEnv is an exec environment for the scripts: reset shows the
// task's question; a step answering the task's answer ends the episode
// with reward 1, others echo with reward 0. The actions crash, hang,
// garbage and stranger misbehave as their names say.
func testExecEnv() {
	sc := bufio.NewScanner(os.Stdin)
	tasks := map[string]map[string]any{}
	send := func(v any) {
		b, _ := json.Marshal(v)
		os.Stdout.Write(append(b, '\n'))
	}
	obs := func(id string, o any, r float64, done bool) {
		send(map[string]any{"id": id, "type": "observation", "data": map[string]any{"observation": o, "reward": r, "done": done, "info": map[string]any{}}})
	}
	for sc.Scan() {
		var f struct {
			ID   string         `json:"id"`
			Type string         `json:"type"`
			Data map[string]any `json:"data"`
		}
		if json.Unmarshal(sc.Bytes(), &f) != nil {
			continue
		}
		switch f.Type {
		case "reset":
			task, _ := f.Data["task"].(map[string]any)
			tasks[f.ID] = task
			keys := make([]string, 0, len(task))
			for k := range task {
				keys = append(keys, k)
			}
			obs(f.ID, map[string]any{"text": fmt.Sprint(task["question"]), "columns": len(keys)}, 0, false)
		case "step":
			a, _ := f.Data["action"].(string)
			switch a {
			case "crash":
				fmt.Fprintln(os.Stderr, "Traceback (most recent call last): boom")
				os.Exit(3)
			case "hang":
				time.Sleep(time.Hour)
			case "garbage":
				fmt.Println("this is not JSON")
			case "stranger":
				obs("nobody", "x", 0, false)
			case "environ":
				obs(f.ID, strings.Join(os.Environ(), " "), 0, false)
			default:
				if a == fmt.Sprint(tasks[f.ID]["answer"]) {
					obs(f.ID, "correct", 1, true)
				} else {
					obs(f.ID, "echo "+a, 0, false)
				}
			}
		}
	}
}

// testMCPServer is a stdio MCP server: echo {text} and fail (isError).
func testMCPServer() {
	s := mcp.NewServer(&mcp.Implementation{Name: "script", Version: "1"}, nil)
	type echoIn struct {
		Text string `json:"text" jsonschema:"what to echo"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "echoes its text"}, func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echo: " + in.Text}}}, nil, nil
	})
	s.AddTool(&mcp.Tool{Name: "fail", Description: "always fails", InputSchema: map[string]any{"type": "object"}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "the tool broke"}}}, nil
	})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// exitCode is the exit code the CLI gives err.
func exitCode(ctx context.Context, err error) int { return usererr.ExitCode(ctx, err) }
