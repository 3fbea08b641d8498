// Package expr evaluates arithmetic expressions (integers, + - * /,
// parentheses, unary signs) exactly, with rational numbers. It is the
// checker behind the countdown reward and the calculator tool, written for
// untrusted model output: bounded length and depth, no exponentiation, and
// division by zero is an error, never a panic.
package expr

import (
	"errors"
	"fmt"
	"math/big"
	"strings"
)

// Limits that keep hostile input cheap.
const (
	MaxLen    = 4096 // bytes of expression
	MaxDepth  = 256  // nesting of parentheses and unary signs
	MaxDigits = 256  // digits of one number literal
)

// Errors returned by Eval; wrap-checked with errors.Is.
var (
	ErrDivByZero = errors.New("division by zero")
	ErrSyntax    = errors.New("syntax error")
	ErrTooLarge  = errors.New("expression too large")
)

// Result is the value of an expression and the integer literals it used,
// in order of appearance.
type Result struct {
	Value   *big.Rat
	Numbers []*big.Int
}

// Eval parses and evaluates s.
func Eval(s string) (Result, error) {
	if len(s) > MaxLen {
		return Result{}, fmt.Errorf("%w: %d bytes (limit %d)", ErrTooLarge, len(s), MaxLen)
	}
	p := &parser{s: s}
	v, err := p.sum(0)
	if err != nil {
		return Result{}, err
	}
	p.skipSpace()
	if p.i < len(p.s) {
		return Result{}, fmt.Errorf("%w: unexpected %q at offset %d", ErrSyntax, p.s[p.i], p.i)
	}
	return Result{Value: v, Numbers: p.numbers}, nil
}

type parser struct {
	s       string
	i       int
	numbers []*big.Int
}

func (p *parser) skipSpace() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t' || p.s[p.i] == '\n' || p.s[p.i] == '\r') {
		p.i++
	}
}

// peekOp returns the next operator byte, rejecting ** and // (Python's
// power and floor division are not countdown operators).
func (p *parser) peekOp() (byte, error) {
	p.skipSpace()
	if p.i >= len(p.s) {
		return 0, nil
	}
	c := p.s[p.i]
	if (c == '*' || c == '/') && p.i+1 < len(p.s) && p.s[p.i+1] == c {
		return 0, fmt.Errorf("%w: operator %q is not allowed", ErrSyntax, p.s[p.i:p.i+2])
	}
	return c, nil
}

// binary parses one left-associative precedence level: operand, then
// any number of (op operand) with op one of ops, each folded into the
// running result by apply.
func (p *parser) binary(depth int, ops string, operand func(*parser, int) (*big.Rat, error), apply func(op byte, left, right *big.Rat) error) (*big.Rat, error) {
	left, err := operand(p, depth)
	if err != nil {
		return nil, err
	}
	for {
		op, err := p.peekOp()
		if err != nil {
			return nil, err
		}
		if op == 0 || strings.IndexByte(ops, op) < 0 {
			return left, nil
		}
		p.i++
		right, err := operand(p, depth)
		if err != nil {
			return nil, err
		}
		if err := apply(op, left, right); err != nil {
			return nil, err
		}
	}
}

func (p *parser) sum(depth int) (*big.Rat, error) {
	return p.binary(depth, "+-", (*parser).product, func(op byte, left, right *big.Rat) error {
		if op == '+' {
			left.Add(left, right)
		} else {
			left.Sub(left, right)
		}
		return nil
	})
}

func (p *parser) product(depth int) (*big.Rat, error) {
	return p.binary(depth, "*/", (*parser).unary, func(op byte, left, right *big.Rat) error {
		if op == '*' {
			left.Mul(left, right)
			return nil
		}
		if right.Sign() == 0 {
			return ErrDivByZero
		}
		left.Quo(left, right)
		return nil
	})
}

func (p *parser) unary(depth int) (*big.Rat, error) {
	if depth > MaxDepth {
		return nil, fmt.Errorf("%w: nested deeper than %d", ErrTooLarge, MaxDepth)
	}
	p.skipSpace()
	if p.i >= len(p.s) {
		return nil, fmt.Errorf("%w: expression ends where a number was expected", ErrSyntax)
	}
	switch c := p.s[p.i]; {
	case c == '-' || c == '+':
		p.i++
		v, err := p.unary(depth + 1)
		if err != nil {
			return nil, err
		}
		if c == '-' {
			v.Neg(v)
		}
		return v, nil
	case c == '(':
		p.i++
		v, err := p.sum(depth + 1)
		if err != nil {
			return nil, err
		}
		p.skipSpace()
		if p.i >= len(p.s) || p.s[p.i] != ')' {
			return nil, fmt.Errorf("%w: missing )", ErrSyntax)
		}
		p.i++
		return v, nil
	case c >= '0' && c <= '9':
		start := p.i
		for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
			p.i++
		}
		if p.i-start > MaxDigits {
			return nil, fmt.Errorf("%w: number with %d digits", ErrTooLarge, p.i-start)
		}
		if p.i < len(p.s) && p.s[p.i] == '.' {
			return nil, fmt.Errorf("%w: decimal numbers are not allowed", ErrSyntax)
		}
		n, _ := new(big.Int).SetString(p.s[start:p.i], 10)
		p.numbers = append(p.numbers, n)
		return new(big.Rat).SetInt(n), nil
	default:
		return nil, fmt.Errorf("%w: unexpected %q at offset %d", ErrSyntax, c, p.i)
	}
}
