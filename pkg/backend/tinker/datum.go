package tinker

import (
	"fmt"
	"maps"
	"math"
	"runtime"
	"slices"
	"strconv"
	"sync"

	"github.com/rllm-org/rllm-go/pkg/backend"
	"github.com/rllm-org/rllm-go/pkg/backend/tinker/wire"
	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// How a backend.Datum becomes a wire Datum:
//
//   - model_input is one encoded_text chunk holding Input;
//   - loss_fn_inputs hold only what the loss reads: target_tokens (int64)
//     always; weights (float32) for cross_entropy; logprobs and
//     advantages (float32) for importance_sampling, ppo and cispo;
//   - the Tinker API has no mask, so Mask (≥ 0) is folded in: every
//     built-in loss is linear in its weight (cross_entropy) or advantage
//     (the others) and min(m·x, m·y) = m·min(x, y) for m ≥ 0, so sending
//     weights·mask, or advantages·mask, gives exactly mask × the loss term;
//   - a nil Weights with a nil Mask is left out (the server counts
//     missing weights as 1).
//
// Every tensor has shape [len(Input)].

// validateDatums refuses, before anything is sent, what the server would
// refuse or silently mistrain on: an empty or over-long datum, per-token
// fields whose length differs from the targets, negative token ids (or
// ids at or above vocab when it is known), NaN or Inf values and
// negative masks. Errors name the datum and the field.
func validateDatums(data []backend.Datum, loss backend.Loss, maxContext, vocab int) error {
	if len(data) == 0 {
		return usererr.Errorf("a training call with no datums; send at least one")
	}
	needLP, needAdv := loss.Needs()
	for i := range data {
		d := &data[i]
		in := &d.LossFnInputs
		n := len(d.Input)
		if n == 0 {
			return usererr.Errorf("datum %d: input is empty; a datum needs at least one input token", i)
		}
		if maxContext > 0 && n > maxContext {
			return usererr.Errorf("datum %d: input has %d tokens, more than the served context of %d; shorten data.max_prompt_length plus data.max_response_length", i, n, maxContext)
		}
		if len(in.TargetTokens) != n {
			return usererr.Errorf("datum %d: target_tokens has %d entries but input has %d; they must match (input = seq[:-1], targets = seq[1:])", i, len(in.TargetTokens), n)
		}
		for _, f := range []struct {
			name string
			toks []int
		}{{"input", d.Input}, {"target_tokens", in.TargetTokens}} {
			for j, t := range f.toks {
				if t < 0 || (vocab > 0 && t >= vocab) || t > math.MaxInt32 {
					return usererr.Errorf("datum %d: %s[%d] is token id %d, outside the vocabulary", i, f.name, j, t)
				}
			}
		}
		for _, f := range []struct {
			name string
			xs   []float64
		}{{"logprobs", in.Logprobs}, {"advantages", in.Advantages}, {"weights", in.Weights}, {"mask", in.Mask}} {
			if f.xs == nil {
				continue
			}
			if len(f.xs) != n {
				return usererr.Errorf("datum %d: %s has %d entries for %d target tokens; give one per target token", i, f.name, len(f.xs), n)
			}
			for j, x := range f.xs {
				if math.IsNaN(x) || math.IsInf(x, 0) {
					return usererr.Errorf("datum %d: %s[%d] is %v; every value sent to the Tinker service must be finite (check the rewards and advantage estimator)", i, f.name, j, x)
				}
				if f.name == "mask" && x < 0 {
					return usererr.Errorf("datum %d: mask[%d] is %g; a mask must be ≥ 0", i, j, x)
				}
				if f.name != "logprobs" && math.Abs(x) > math.MaxFloat32 {
					return usererr.Errorf("datum %d: %s[%d] is %g, too large for the float32 the wire carries", i, f.name, j, x)
				}
			}
		}
		for j, e := range in.EntropyWeights {
			if e != 0 {
				return usererr.Errorf("datum %d: entropy_weights[%d] is %g, but an entropy term needs the whole next-token distribution, which the Tinker API never returns; set actor.entropy_coeff=0 on backend tinker", i, j, e)
			}
		}
		if needLP && in.Logprobs == nil {
			return usererr.Errorf("datum %d: logprobs (the sampling logprobs) are missing, which loss %s needs", i, loss.Name)
		}
		if needAdv && in.Advantages == nil {
			return usererr.Errorf("datum %d: advantages are missing, which loss %s needs", i, loss.Name)
		}
	}
	return nil
}

// encodeTrainingBody builds the JSON body of forward_backward or forward
// in two parts, head and tail, so that the model id and seq_id assigned
// at submit time go between them without encoding the datums again:
// head + quoted model id + `,"seq_id":` + seq + tail (spliceSeq).
func encodeTrainingBody(path string, data []backend.Datum, loss backend.Loss) (head, tail []byte) {
	head = append(head, `{"type":`...)
	head = strconv.AppendQuote(head, path)
	head = append(head, `,"model_id":`...)

	key := "forward_backward_input"
	if path == wire.PathForward {
		key = "forward_input"
	}
	var end []byte
	end = append(end, `],"loss_fn":`...)
	end = strconv.AppendQuote(end, loss.Name)
	if len(loss.Config) > 0 {
		end = append(end, `,"loss_fn_config":{`...)
		keys := slices.Sorted(maps.Keys(loss.Config))
		for i, k := range keys {
			if i > 0 {
				end = append(end, ',')
			}
			end = strconv.AppendQuote(end, k)
			end = append(end, ':')
			end = strconv.AppendFloat(end, loss.Config[k], 'g', -1, 64)
		}
		end = append(end, '}')
	}
	end = append(end, "}}"...)

	parts := encodeDatums(data, loss)
	size := len(key) + 16 + len(end) + len(parts)
	for _, p := range parts {
		size += len(p)
	}
	tail = make([]byte, 0, size)
	tail = append(tail, `,"`...)
	tail = append(tail, key...)
	tail = append(tail, `":{"data":[`...)
	for i, p := range parts {
		if i > 0 {
			tail = append(tail, ',')
		}
		tail = append(tail, p...)
	}
	return head, append(tail, end...)
}

// encodeDatums writes the datums as comma-separated JSON in one part per
// CPU (for large batches), each sized up front.
func encodeDatums(data []backend.Datum, loss backend.Loss) [][]byte {
	workers := max(1, min(runtime.GOMAXPROCS(0), len(data)/8))
	parts := make([][]byte, workers)
	per := (len(data) + workers - 1) / workers
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := min(w*per, len(data)), min((w+1)*per, len(data))
		wg.Add(1)
		go func() {
			defer wg.Done()
			est := 0
			for i := lo; i < hi; i++ {
				est += 256 + 48*len(data[i].Input)
			}
			out := make([]byte, 0, est)
			for i := lo; i < hi; i++ {
				if i > lo {
					out = append(out, ',')
				}
				out = appendDatum(out, &data[i], loss)
			}
			parts[w] = out
		}()
	}
	wg.Wait()
	nonEmpty := parts[:0]
	for _, p := range parts {
		if len(p) > 0 {
			nonEmpty = append(nonEmpty, p)
		}
	}
	return nonEmpty
}

// appendDatum writes one wire Datum (see the package comment on the
// mapping).
func appendDatum(b []byte, d *backend.Datum, loss backend.Loss) []byte {
	in := &d.LossFnInputs
	n := len(d.Input)
	b = append(b, `{"model_input":{"chunks":[{"type":"encoded_text","tokens":`...)
	b = appendInts(b, d.Input)
	b = append(b, `}]},"loss_fn_inputs":{"target_tokens":`...)
	b = appendTensorInts(b, in.TargetTokens)
	if loss.Name == backend.LossCrossEntropy {
		if in.Weights != nil || in.Mask != nil {
			b = append(b, `,"weights":`...)
			b = appendTensorProduct(b, n, in.Weights, in.Mask, 1)
		}
	} else {
		b = append(b, `,"logprobs":`...)
		b = appendTensorProduct(b, n, in.Logprobs, nil, 0)
		b = append(b, `,"advantages":`...)
		b = appendTensorProduct(b, n, in.Advantages, in.Mask, 0)
	}
	return append(b, "}}"...)
}

func appendInts(b []byte, xs []int) []byte {
	b = append(b, '[')
	for i, x := range xs {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(x), 10)
	}
	return append(b, ']')
}

func appendShape(b []byte, n int) []byte {
	b = append(b, `,"shape":[`...)
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, "]}"...)
}

func appendTensorInts(b []byte, xs []int) []byte {
	b = append(b, `{"data":`...)
	b = appendInts(b, xs)
	b = append(b, `,"dtype":"int64"`...)
	return appendShape(b, len(xs))
}

// appendTensorProduct writes the n float32 values xs[i]·mask[i] (a nil
// xs is def everywhere, a nil mask is 1), each in the shortest form that
// reads back as the same float32.
func appendTensorProduct(b []byte, n int, xs, mask []float64, def float64) []byte {
	b = append(b, `{"data":[`...)
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		x := def
		if xs != nil {
			x = xs[i]
		}
		if mask != nil {
			x *= mask[i]
		}
		f := float32(x)
		if f == 0 {
			b = append(b, '0')
			continue
		}
		b = strconv.AppendFloat(b, float64(f), 'g', -1, 32)
	}
	b = append(b, `],"dtype":"float32"`...)
	return appendShape(b, n)
}

// decodeOutputs maps the server's loss_fn_outputs back onto the datums:
// logprobs per target token, and the elementwise loss (computed here from
// the logprobs with backend.Loss.Token when the server leaves it out).
func decodeOutputs(path string, res wire.ForwardBackwardResult, data []backend.Datum, loss backend.Loss) (backend.ForwardBackwardOutput, error) {
	if len(res.LossFnOutputs) != len(data) {
		return backend.ForwardBackwardOutput{}, fmt.Errorf("%s: the server returned %d loss_fn_outputs for %d datums", path, len(res.LossFnOutputs), len(data))
	}
	out := backend.ForwardBackwardOutput{LossFnOutputs: make([]backend.LossFnOutput, len(data)), Metrics: map[string]float64{}}
	var total float64
	tokens := 0
	for i, o := range res.LossFnOutputs {
		n := len(data[i].Input)
		lpT, ok := o["logprobs"]
		if !ok || len(lpT.Data) != n {
			return backend.ForwardBackwardOutput{}, fmt.Errorf("%s: loss_fn_outputs[%d] has %d logprobs for %d target tokens", path, i, len(lpT.Data), n)
		}
		lp := lpT.Data
		el := make([]float64, n)
		if elT, ok := o["elementwise_loss"]; ok && len(elT.Data) == n {
			copy(el, elT.Data)
		} else {
			for t := range n {
				el[t], _ = loss.Token(&data[i].LossFnInputs, t, lp[t])
			}
		}
		for _, x := range el {
			total += x
		}
		tokens += n
		out.LossFnOutputs[i] = backend.LossFnOutput{Logprobs: lp, ElementwiseLoss: el}
	}
	for k, v := range res.Metrics {
		out.Metrics[k] = v
	}
	if _, ok := out.Metrics["loss:sum"]; !ok {
		out.Metrics["loss:sum"] = total
	}
	out.Metrics["tokens:sum"] = float64(tokens)
	return out, nil
}
