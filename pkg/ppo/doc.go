// Package ppo holds the numerics of RL fine-tuning: advantage estimators,
// policy losses with their gradients, KL estimators, loss aggregation and
// the batch filters that decide which episodes train.
//
// It is a leaf: it imports gonum and the standard library only, and takes
// plain slices so the trainer, the local backend and a Tinker client
// (which applies a client-side loss as cross_entropy with
// weights = -gradient) can all call it.
//
// # Layout of the inputs
//
// Per-sequence values are plain []float64 indexed by sequence. Per-token
// values of a batch are one flat []float64 holding every sequence back to
// back; offsets (len n+1, offsets[0] = 0, non-decreasing, last = number of
// tokens) say that sequence i owns tokens offsets[i]:offsets[i+1]. Group
// ids are dense ints 0..G-1 (the trainer numbers task groups in order).
//
// # Conventions
//
// Every definition is pinned to a published source, named in the doc
// comment of the function implementing it: verl's
// verl/trainer/ppo/core_algos.py and verl/utils/torch_functional.py, rLLM's
// rllm/trainer (algorithms/, verl/agent_workflow_trainer.py), TRL, Tinker's
// loss documentation, or the paper. Where verl and rLLM's own trainer
// disagree (GRPO's standard deviation, REINFORCE++-baseline's batch
// scaling) Config.Reference selects which one to reproduce; docs/algorithms.md
// lists every such difference.
//
// Token-level functions write into caller-provided buffers and allocate
// nothing per call. Inputs are validated: mismatched lengths give a
// *LengthError naming both lengths, NaN or ±Inf anywhere in an input gives
// a *NonFiniteError naming the input and index, and no function returns a
// NaN. On error, output buffers are zeroed.
package ppo
