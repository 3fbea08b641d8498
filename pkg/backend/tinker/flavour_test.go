package tinker

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/internal/faketinker"
	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/backend/local"
	"github.com/rllm-org/rllm-go/pkg/backend/tinker/wire"
)

var flavours = []faketinker.Flavour{faketinker.FlavourTinker, faketinker.FlavourSkyRL}

// loadsFirst asserts every load_weights the fake took was its model's
// first request.
func loadsFirst(t *testing.T, srv *faketinker.Server) int {
	t.Helper()
	seen := map[string]bool{}
	loads := 0
	for _, e := range srv.Log() {
		if e.ModelID == "" || e.Status != http.StatusOK {
			continue
		}
		switch e.Path {
		case wire.PathLoadWeights:
			loads++
			if seen[e.ModelID] {
				t.Errorf("load_weights into %s after other requests", e.ModelID)
			}
		case wire.PathUnloadModel, wire.PathRetrieveFuture, "get_info":
			continue
		}
		seen[e.ModelID] = true
	}
	return loads
}

// Against each service: the sampler path form it answers is recorded,
// exported through its own archive route, sampled from, published again;
// loads go into fresh models; the service is told apart at start.
func TestFlavoursCheckpointExportSample(t *testing.T) {
	for _, fl := range flavours {
		t.Run(string(fl), func(t *testing.T) {
			r := newRig(t, faketinker.Options{Flavour: fl}, nil)
			ctx := context.Background()
			wantService := map[faketinker.Flavour]string{faketinker.FlavourTinker: "Tinker", faketinker.FlavourSkyRL: "SkyRL"}[fl]
			if got := r.b.Service().Name; got != wantService {
				t.Fatalf("service detected as %s; want %s", got, wantService)
			}
			d := datum("hi", "yo", 1)
			if err := step(ctx, r.b, []backend.Datum{d}); err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(t.TempDir(), "global_step_1", "model")
			wp, err := r.b.SaveState(ctx, dir).Result(ctx)
			if err != nil {
				t.Fatal(err)
			}
			ck, err := ReadCheckpoint(dir)
			if err != nil {
				t.Fatal(err)
			}
			if skyrl := fl == faketinker.FlavourSkyRL; IsSkyRLPath(ck.SamplerPath) != skyrl {
				t.Errorf("sampler path %s recorded; want SkyRL's form: %t", ck.SamplerPath, skyrl)
			}
			// A save over an existing name is refused (hosted: a failed
			// future; SkyRL: a 409 at once) and training goes on.
			if _, err := r.b.SaveState(ctx, "mine").Result(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := r.b.SaveState(ctx, "mine").Result(ctx); err == nil || !strings.Contains(err.Error(), "already exists") {
				t.Errorf("saving over a name: %v", err)
			}
			saved := sumLogprob(t, r.b, d)
			if err := step(ctx, r.b, []backend.Datum{d}); err != nil {
				t.Fatal(err)
			}
			if _, err := r.b.LoadState(ctx, wp, true).Result(ctx); err != nil {
				t.Fatal(err)
			}
			if got := sumLogprob(t, r.b, d); got != saved {
				t.Errorf("after the load the logprob is %g; want the saved %g", got, saved)
			}
			// A second load (probing another checkpoint) takes another fresh model.
			if _, err := r.b.LoadState(ctx, wp, false).Result(ctx); err != nil {
				t.Fatal(err)
			}
			if n := loadsFirst(t, r.srv); n != 2 {
				t.Errorf("%d loads; want 2", n)
			}
			// Export from the recorded path, through the service's route.
			out := filepath.Join(t.TempDir(), "adapter")
			if err := r.b.Client().ExportAdapter(ctx, ck.SamplerPath, out, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(out, "adapter_model.safetensors")); err != nil {
				t.Fatal(err)
			}
			// The per-step publishing to vLLM: a fresh snapshot exported.
			if err := r.b.ExportAdapter(ctx, filepath.Join(t.TempDir(), "step")); err != nil {
				t.Fatal(err)
			}
			snap, err := r.b.PublishSampler(ctx, "").Result(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var tok local.Tokenizer
			res, err := snap.Sample(ctx, backend.SampleRequest{Prompt: tok.ChatTemplate(nil, true), Params: backend.SamplingParams{MaxTokens: 4, Temperature: 1}})
			if err != nil || len(res.Sequences) != 1 {
				t.Fatalf("sample: %+v, %v", res, err)
			}
			if err := r.b.DeleteCheckpoint(ctx, dir); err != nil {
				t.Fatal(err)
			}
			for _, p := range r.srv.Checkpoints() {
				if strings.Contains(p, "/"+filepath.Base(strings.TrimPrefix(wp, "tinker://"))) {
					t.Errorf("%s left after the delete", p)
				}
			}
		})
	}
}

// A save whose answer was lost is sent again: hosted Tinker de-duplicates
// it by seq_id; SkyRL refuses it as "already exists" (409), which is done
// once the checkpoint is listed. A lost load is loaded again into a fresh
// model on SkyRL (which refuses a second load on one model).
func TestResentSavesAndLoads(t *testing.T) {
	for _, fl := range flavours {
		t.Run(string(fl), func(t *testing.T) {
			r := newRig(t, faketinker.Options{Flavour: fl}, nil)
			ctx := context.Background()
			if err := step(ctx, r.b, []backend.Datum{datum("q", "a", 1)}); err != nil {
				t.Fatal(err)
			}
			r.srv.Inject(faketinker.Fault{Path: wire.PathSaveWeights, Kind: faketinker.FaultDropAfter})
			r.srv.Inject(faketinker.Fault{Path: wire.PathSaveForSampler, Kind: faketinker.FaultDropAfter})
			dir := filepath.Join(t.TempDir(), "model")
			wp, err := r.b.SaveState(ctx, dir).Result(ctx)
			if err != nil {
				t.Fatalf("a save whose answer was lost: %v", err)
			}
			ck, err := ReadCheckpoint(dir)
			if err != nil || ck.WeightsPath != wp {
				t.Fatalf("record %+v, %v", ck, err)
			}
			conflicts, dups := 0, 0
			for _, e := range r.srv.Log() {
				if e.Status == http.StatusConflict {
					conflicts++
				}
				if e.Dup {
					dups++
				}
			}
			if fl == faketinker.FlavourSkyRL && conflicts != 2 || fl == faketinker.FlavourTinker && (conflicts != 0 || dups != 2) {
				t.Errorf("%d 409s and %d de-duplicated resends", conflicts, dups)
			}
			// Training goes on after the resends (no seq_id gap).
			if err := step(ctx, r.b, []backend.Datum{datum("q", "a", 1)}); err != nil {
				t.Fatal(err)
			}
			r.srv.Inject(faketinker.Fault{Path: wire.PathLoadWeights, Kind: faketinker.FaultDropAfter})
			if _, err := r.b.LoadState(ctx, wp, true).Result(ctx); err != nil {
				t.Fatalf("a load whose answer was lost: %v", err)
			}
			loadsFirst(t, r.srv)
			if err := step(ctx, r.b, []backend.Datum{datum("q", "a", 1)}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// What SkyRL drops (ttl_seconds, grad_clip_norm, the LoRA targets) is
// said at start in one line and not sent (the fake refuses it); hosted
// Tinker gets all of it.
func TestIgnoredSettingsSaidAtStart(t *testing.T) {
	for _, fl := range flavours {
		t.Run(string(fl), func(t *testing.T) {
			r := newRig(t, faketinker.Options{Flavour: fl}, func(o *Options) {
				o.SamplerTTL = time.Hour
				o.GradClipNorm = 1
				o.LoRA.TrainUnembed = false
			})
			ctx := context.Background()
			fb := r.b.ForwardBackward(ctx, []backend.Datum{datum("q", "a", 1)}, backend.Loss{Name: backend.LossImportanceSampling})
			p := backend.DefaultAdamParams(0.01)
			p.GradClipNorm = 1
			if _, err := r.b.OptimStep(ctx, p).Result(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := fb.Result(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := r.b.PublishSampler(ctx, "").Result(ctx); err != nil {
				t.Fatal(err)
			}
			var lines []string
			for _, l := range strings.Split(r.log.String(), "\n") {
				if strings.Contains(l, "ignores") {
					lines = append(lines, l)
				}
			}
			if fl == faketinker.FlavourTinker {
				if len(lines) != 0 {
					t.Errorf("hosted Tinker: %q", lines)
				}
				if ttls := r.srv.SamplerTTLs(); len(ttls) != 1 || ttls[0] != 3600 {
					t.Errorf("ttl_seconds sent: %v", ttls)
				}
				return
			}
			if len(lines) != 1 {
				t.Fatalf("want one line naming what SkyRL ignores; log:\n%s", r.log.String())
			}
			for _, w := range []string{"backend.tinker.sampler_ttl_s=3600", "actor.optim.grad_clip=1", "train_unembed=false", "alpha"} {
				if !strings.Contains(lines[0], w) {
					t.Errorf("%q lacks %q", lines[0], w)
				}
			}
			if !strings.Contains(r.log.String(), "does not say the context length") {
				t.Errorf("no word that the context check cannot run:\n%s", r.log.String())
			}
		})
	}
}

// Client-side losses take their logprobs from the JSON forward route
// (SkyRL serves it; hosted Tinker serves it to SDKs on the JSON path);
// forward_backward is never asked for a forward-only pass.
func TestForwardOnlyUsesForward(t *testing.T) {
	for _, fl := range flavours {
		t.Run(string(fl), func(t *testing.T) {
			r := newRig(t, faketinker.Options{Flavour: fl}, nil)
			sumLogprob(t, r.b, datum("q", "a", 1))
			for _, e := range r.srv.Log() {
				if e.Path == wire.PathForwardBackward {
					t.Errorf("a forward went to forward_backward: %+v", e)
				}
			}
			if steps, _ := r.srv.Model(r.b.ModelID()).Step(context.Background()); steps != 0 {
				t.Errorf("the forward trained (%d steps)", steps)
			}
		})
	}
}

// Hosted Tinker's JWT sign-in: the key (or the credential command's
// output) is exchanged for a JWT, which every request then carries; it
// is exchanged again before it expires and after a 401; no credential
// reaches the log.
func TestJWTSignIn(t *testing.T) {
	cases := []struct {
		name     string
		fake     faketinker.Options
		key, cmd string
		wantErr  string
	}{
		{"key", faketinker.Options{JWT: true}, testKey, "", ""},
		{"command, no key", faketinker.Options{JWT: true}, "", "printf %s " + testKey, ""},
		{"organisation requires the command", faketinker.Options{JWT: true, CredentialCmd: true}, "tml-not-the-key-000", "echo " + testKey, ""},
		{"organisation requires the command, none set", faketinker.Options{JWT: true, CredentialCmd: true}, testKey, "", "TINKER_CREDENTIAL_CMD"},
		{"command fails", faketinker.Options{JWT: true}, "", "echo " + testKey + "; exit 3", "exit status 3"},
		{"no JWT sign-in, command only", faketinker.Options{}, "", "echo " + testKey, "takes API keys only"},
		{"SkyRL", faketinker.Options{Flavour: faketinker.FlavourSkyRL}, testKey, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// One clock for the client and the fake, moved on to near the
			// JWT's expiry.
			var shift atomic.Int64
			clock := func() time.Time { return time.Now().Add(time.Duration(shift.Load())) }
			tc.fake.Now = clock
			srv := newFake(t, tc.fake)
			log := &syncBuffer{}
			opts := testOptions(srv.URL, log)
			opts.APIKey, opts.CredentialCmd = tc.key, tc.cmd
			b, err := New(context.Background(), opts)
			if tc.wantErr != "" {
				if err == nil {
					b.Close()
					t.Fatal("signed in")
				}
				if !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), testKey) {
					t.Fatalf("err = %v; want %q and no key", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			b.c.cred.now = clock
			ctx := context.Background()
			if err := step(ctx, b, []backend.Datum{datum("q", "a", 1)}); err != nil {
				t.Fatal(err)
			}
			if !tc.fake.JWT {
				if b.Client().JWTExchanges() != 0 {
					t.Errorf("%d JWT exchanges with a service without JWT sign-in", b.Client().JWTExchanges())
				}
				return
			}
			if n := srv.JWTExchanges(); n != 1 {
				t.Errorf("%d exchanges; want 1", n)
			}
			// Near expiry the JWT is exchanged again before use.
			shift.Store(int64(56 * time.Minute))
			if err := step(ctx, b, []backend.Datum{datum("q", "a", 1)}); err != nil {
				t.Fatal(err)
			}
			if n := srv.JWTExchanges(); n != 2 {
				t.Errorf("%d exchanges after the JWT neared expiry; want 2", n)
			}
			// A JWT the service stops taking: a 401, a new JWT, the call again.
			srv.RevokeJWTs()
			if err := step(ctx, b, []backend.Datum{datum("q", "a", 1)}); err != nil {
				t.Fatal(err)
			}
			if n := srv.JWTExchanges(); n != 3 {
				t.Errorf("%d exchanges after a revoke; want 3", n)
			}
			for _, e := range srv.Log() {
				if e.Path != "auth/token" && e.Path != "client/config" && e.APIKey == testKey {
					t.Fatalf("the raw key went to %s", e.Path)
				}
			}
			if strings.Contains(log.String(), testKey) || strings.Contains(log.String(), "eyJ") {
				t.Errorf("a credential in the log:\n%s", log.String())
			}
		})
	}
}

// Both sampler path forms parse and record; anything else is refused.
func TestPathForms(t *testing.T) {
	cases := []struct {
		path, run, kind, name string
		skyrl, ok             bool
	}{
		{"tinker://run-1/sampler_weights/s1", "run-1", "sampler_weights", "s1", false, true},
		{"tinker://run-1/weights/w1", "run-1", "weights", "w1", false, true},
		{"tinker://model_ab12/rllm-x-1", "model_ab12", "sampler_weights", "rllm-x-1", true, true},
		{"tinker://model_ab12/weights", "", "", "", false, false},
		{"tinker://model_ab12/", "", "", "", false, false},
		{"tinker:///x", "", "", "", false, false},
		{"tinker://a/b/c/d", "", "", "", false, false},
		{"tinker://a/other/c", "", "", "", false, false},
		{"s3://a/b", "", "", "", false, false},
	}
	for _, tc := range cases {
		run, kind, name, err := ParsePath(tc.path)
		if (err == nil) != tc.ok || run != tc.run || kind != tc.kind || name != tc.name {
			t.Errorf("ParsePath(%q) = %q %q %q %v", tc.path, run, kind, name, err)
		}
		if tc.ok && IsSkyRLPath(tc.path) != tc.skyrl {
			t.Errorf("IsSkyRLPath(%q) = %t", tc.path, !tc.skyrl)
		}
		err = WriteCheckpoint(t.TempDir(), Checkpoint{WeightsPath: "tinker://m/weights/w", SamplerPath: tc.path, BaseModel: "b"})
		if wantOK := tc.ok && tc.kind == "sampler_weights"; (err == nil) != wantOK {
			t.Errorf("recording sampler_path %q: %v", tc.path, err)
		}
	}
}

// A service without the JSON forward route gets one line saying so (a
// 404 "Not Found" from the router); any other 404 passes unchanged.
func TestNoForwardRoute(t *testing.T) {
	c, err := NewClient(ClientOptions{BaseURL: "http://tinker.test"})
	if err != nil {
		t.Fatal(err)
	}
	route := &HTTPError{Path: wire.PathForward, Status: http.StatusNotFound, Msg: "Not Found"}
	if err := noRoute(c, wire.PathForward, route); exitCode(err) != 2 || !strings.Contains(err.Error(), "/api/v1/forward") {
		t.Errorf("no route: %v", err)
	}
	model := &HTTPError{Path: wire.PathForward, Status: http.StatusNotFound, Msg: "Model not found"}
	if err := noRoute(c, wire.PathForward, model); err != model {
		t.Errorf("an unknown model: %v", err)
	}
	if err := noRoute(c, wire.PathOptimStep, route); err != route {
		t.Errorf("another call: %v", err)
	}
}
