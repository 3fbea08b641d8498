package openai

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/pkg/backend/local"
	wire "github.com/rllm-org/rllm-go/pkg/openaiwire"
)

// benchTokens matches the engine benchmark's reply length
// (pkg/backend/local BenchmarkEngine), so the two rates compare.
const benchTokens = 64

// BenchmarkServe is the server's generation rate through HTTP: C clients
// each send a chat request of 64 tokens (ignore_eos) and wait for the
// answer, twice per iteration, as BenchmarkEngine does without HTTP.
// Non-streaming requests report tokens/s; streaming ones also the median
// and 90th percentile time to the first content chunk.
func BenchmarkServe(b *testing.B) {
	for _, stream := range []bool{false, true} {
		for _, c := range []int{1, 8, 64, 256} {
			name := fmt.Sprintf("c=%d", c)
			if stream {
				name = "stream/" + name
			}
			b.Run(name, func(b *testing.B) { benchServe(b, c, stream) })
		}
	}
}

func benchServe(b *testing.B, c int, stream bool) {
	be, err := local.New(local.Options{Config: local.DefaultConfig()})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	ts, _ := be.PublishSampler(context.Background(), "").Result(context.Background())
	eng := local.NewEngine(ts.(*local.Snapshot), "bench", local.EngineOptions{MaxNumSeqs: 256})
	defer eng.Close()
	srv := httptest.NewServer(New(eng, Options{}))
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: c, MaxConnsPerHost: c}}
	body := fmt.Sprintf(`{"messages":[{"role":"user","content":"12+34="}],"max_tokens":%d,"ignore_eos":true,"temperature":1,"stream":%v,"return_token_ids":%v}`, benchTokens, stream, stream)
	const rounds = 2
	var mu sync.Mutex
	generated := 0
	var ttfts []float64
	cpu0 := cpuSeconds()
	for b.Loop() {
		var wg sync.WaitGroup
		for range c {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					start := time.Now()
					resp, err := client.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
					if err != nil {
						b.Error(err)
						return
					}
					n, ttft := 0, 0.0
					if stream {
						n, ttft = readStream(resp.Body, start)
					} else {
						var out struct {
							Usage wire.Usage `json:"usage"`
						}
						raw, _ := io.ReadAll(resp.Body)
						json.Unmarshal(raw, &out)
						n = out.Usage.CompletionTokens
					}
					resp.Body.Close()
					if n != benchTokens {
						b.Errorf("%d tokens generated, want %d", n, benchTokens)
					}
					mu.Lock()
					generated += n
					if stream {
						ttfts = append(ttfts, ttft)
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	b.ReportMetric(float64(generated)/b.Elapsed().Seconds(), "tokens/s")
	if cpu := cpuSeconds() - cpu0; cpu > 0 {
		b.ReportMetric(float64(generated)/cpu, "tokens/cpu-s")
	}
	if len(ttfts) > 0 {
		slices.Sort(ttfts)
		b.ReportMetric(ttfts[len(ttfts)/2]*1e3, "ttft-p50-ms")
		b.ReportMetric(ttfts[len(ttfts)*9/10]*1e3, "ttft-p90-ms")
	}
}

// readStream counts the tokens of a streamed chat reply (a chunk may
// carry several) by their ids, and times the first chunk with a token.
func readStream(r io.Reader, start time.Time) (int, float64) {
	sc := bufio.NewScanner(r)
	n, ttft := 0, 0.0
	for sc.Scan() {
		line := sc.Bytes()
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok || string(data) == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				TokenIDs []int `json:"token_ids"`
			} `json:"choices"`
		}
		json.Unmarshal(data, &chunk)
		for _, ch := range chunk.Choices {
			if len(ch.TokenIDs) > 0 && ttft == 0 {
				ttft = time.Since(start).Seconds()
			}
			n += len(ch.TokenIDs)
		}
	}
	return n, ttft
}
