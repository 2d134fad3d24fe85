package jinja

// [agentkv] Loop memoization: an agent session's next prompt renders the
// same messages as the last one plus a few, and the chat template's
// {% for message in messages %} ran its body again for every one of them.
// RenderMemo remembers, per iteration of one such loop, what the body read
// from outside itself and what it wrote, and in the next render writes the
// iteration's recorded output instead of running the body when the item is
// the same Dict and every recorded read gives the same value again. The
// output is the same as running the body, because the body's output and
// effects depend only on what it reads:
//
//   - the item: the same *Dict (the caller hands unchanged messages back
//     as the same Dict, and a memoizable template calls no method that
//     changes a value in place);
//   - names resolved outside the loop (globals, namespaces, earlier sets),
//     compared by value (strings, numbers, booleans, none, undefined) or
//     by identity (lists, dicts; callables never match), and name.attr
//     reads of a dict resolved outside the loop (a namespace's fields, the
//     loop object's index0, first, last ...), compared the same way;
//   - names the loop's own scope holds from earlier iterations (the engine
//     keeps one scope for all of them), compared likewise;
//   - a comparison (==, !=, <, >, <=, >=) with such a read as an operand
//     is recorded as the comparison and its result instead: the body reads
//     nothing else of the value, so it runs the same while the comparison
//     comes out the same (Qwen3's loop.index0 > ns.last_query_index after
//     a new user turn moved the index).
//
// Its effects are replayed: the names it set in the loop's scope (their
// final values) and the namespace fields it set. Anything the tracking
// cannot see turns memoization off for the whole template at compile time:
// macros, call blocks, set blocks, filter blocks (they run in evaluators of
// their own), methods that change values in place, recursive loops. A loop
// is memoized only when it iterates a plain name with no filter, else,
// break or continue, runs once per render and not inside another memoized
// loop's iteration. TestLoopMemo checks memoized renders against plain
// ones over random conversations.

import (
	"reflect"
	"slices"
)

// LoopMemo is what a render recorded for the next render of the same
// template (RenderMemo). It is immutable once returned and may be shared.
type LoopMemo struct {
	loops map[*forNode]*loopMemo
}

// loopMemo is one loop's iterations.
type loopMemo struct {
	iters []iterMemo
	bad   bool // the loop ran more than once in the render
}

type iterMemo struct {
	ok    bool
	item  *Dict
	reads []memoRead
	out   string // a slice of the render's output, [start:end)
	start int
	end   int
	// replayed: taken from the previous render's memo (for tests).
	replayed bool
	sets     []memoSet
	nsSets   []memoNSSet
}

// memoRead is a read of name (attr == "") or of name.attr, l, or a
// comparison (op) of l and r of which at least one is such a read, with
// its result: an iteration that compares the loop's index with a
// namespace field that moved since the last render (Qwen3's
// loop.index0 > ns.last_query_index, after a new user turn) gives the
// same output as long as the comparison comes out the same.
type memoRead struct {
	l, r memoOperand
	op   string // "": a read of l
	res  bool
}

// memoOperand is name or name.attr read from outside the iteration
// (read), or a value the iteration computed.
type memoOperand struct {
	name, attr string
	read       bool
	v          Value
}

// current is the operand's value in the loop's scope now; ok false when
// name.attr no longer resolves.
func (o memoOperand) current(sc *scope) (Value, bool) {
	if !o.read {
		return o.v, true
	}
	v, _ := sc.get(o.name)
	if o.attr == "" {
		return v, true
	}
	if !v.IsDict() {
		return Undefined(), false
	}
	return v.AsDict().Get(o.attr)
}

type memoSet struct {
	name string
	v    Value
}

type memoNSSet struct {
	ns, attr string
	v        Value
}

// iterRec is the recording state of one iteration.
type iterRec struct {
	child     *scope
	valVar    string
	sets      map[string]bool
	nsWritten map[[2]string]bool
	m         iterMemo
}

// RenderMemo is RenderValuesSize that reuses prev (the memo a previous
// RenderMemo of this template returned, or nil) and returns the memo for
// the next render (nil when the template has no memoizable loop).
func (t *Template) RenderMemo(data map[string]Value, size int, prev *LoopMemo) (string, *LoopMemo, error) {
	if !t.memo {
		s, err := render(t.nodes, data, size)
		return s, nil, err
	}
	e := newEvaluator(data, size)
	e.memoPrev, e.memoNext = prev, &LoopMemo{loops: map[*forNode]*loopMemo{}}
	if err := e.execNodes(t.nodes); err != nil {
		return "", nil, err
	}
	out := e.output.String()
	next := e.memoNext
	for n, lm := range next.loops {
		if lm.bad {
			delete(next.loops, n)
			continue
		}
		// Every iteration's output as a slice of this render's, so the
		// memo keeps one output alive, not one per turn it came from.
		for i := range lm.iters {
			lm.iters[i].out = out[lm.iters[i].start:lm.iters[i].end]
		}
	}
	if len(next.loops) == 0 {
		next = nil
	}
	return out, next, nil
}

// MutatesValues reports whether the template calls a method that changes
// a list or dict in place (update, pop, append ...): a caller that hands
// it the same values on every render must not, since one render's change
// would leak into the next.
func (t *Template) MutatesValues() bool { return t.mutates }

// markMemoizable decides, once at compile time, whether the template
// mutates values in place and whether it may memoize, and marks its
// memoizable loops.
func markMemoizable(nodes []node) (mutates, memo bool) {
	ok := true
	walkAST(reflect.ValueOf(nodes), func(x any) {
		switch n := x.(type) {
		case *macroNode, *callNode, *setBlockNode, *filterBlockNode:
			ok = false
		case *attrExpr:
			if mutatingMethods[n.attr] {
				mutates = true
			}
		case *forNode:
			if n.recursive {
				ok = false
			}
		}
	})
	if !ok || mutates {
		return mutates, false
	}
	memoized := false
	walkAST(reflect.ValueOf(nodes), func(x any) {
		n, isFor := x.(*forNode)
		if !isFor {
			return
		}
		if _, plain := n.iter.(*nameExpr); !plain || n.keyVar != "" || n.filterExpr != nil || n.elseBody != nil {
			return
		}
		jumps := false
		walkAST(reflect.ValueOf(n.body), func(y any) {
			switch y.(type) {
			case *breakNode, *continueNode:
				jumps = true
			}
		})
		if !jumps {
			n.memo, memoized = true, true
		}
	})
	return false, memoized
}

var mutatingMethods = map[string]bool{"update": true, "pop": true, "popitem": true, "setdefault": true, "clear": true,
	"append": true, "extend": true, "insert": true, "remove": true, "sort": true, "reverse": true}

var valueType = reflect.TypeOf(Value{})

// walkAST calls f on every node and expression reachable from v.
func walkAST(v reflect.Value, f func(any)) {
	switch v.Kind() {
	case reflect.Interface:
		if !v.IsNil() {
			walkAST(v.Elem(), f)
		}
	case reflect.Pointer:
		if v.IsNil() {
			return
		}
		if v.Type().Implements(reflect.TypeOf((*node)(nil)).Elem()) {
			// The AST's fields are unexported: rebuild the pointer.
			f(reflect.NewAt(v.Type().Elem(), v.UnsafePointer()).Interface())
		}
		walkAST(v.Elem(), f)
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			walkAST(v.Index(i), f)
		}
	case reflect.Struct:
		if v.Type() == valueType {
			return
		}
		for i := range v.NumField() {
			walkAST(v.Field(i), f)
		}
	}
}

// sameValue reports whether a read gives the same value again: equal
// scalars, or the same list or dict.
func sameValue(a, b Value) bool {
	if a.kind != b.kind {
		return false
	}
	switch a.kind {
	case KindUndefined, KindNone:
		return true
	case KindBool, KindInt, KindFloat, KindString:
		return a.v == b.v
	case KindList:
		return a.AsList() == b.AsList()
	case KindDict:
		return a.AsDict() == b.AsDict()
	}
	return false
}

// Where a name resolves, relative to the recording iteration's loop
// scope.
const (
	inInner = iota // a scope the iteration made (a nested loop's)
	inLoop         // the loop's own scope
	inOuter        // outside the loop (or nowhere)
)

func (e *evaluator) locate(name string) (Value, int) {
	seen := false // the loop's scope is at or below s
	for s := e.scope; s != nil; s = s.parent {
		if s == e.rec.child {
			seen = true
		}
		v, ok := s.vars[name]
		switch {
		case !ok:
			continue
		case s == e.rec.child:
			return v, inLoop
		case seen:
			return v, inOuter
		}
		// Below the loop's scope if the loop's scope is above s; a chain
		// without it (never, with what markMemoizable allows) counts as
		// outside, so the read is recorded.
		for a := s.parent; a != nil; a = a.parent {
			if a == e.rec.child {
				return v, inInner
			}
		}
		return v, inOuter
	}
	return Undefined(), inOuter
}

// recordName evaluates a name inside a recording iteration.
func (e *evaluator) recordName(name string) Value {
	o := e.trackName(name)
	if o.read {
		e.rec.m.reads = append(e.rec.m.reads, memoRead{l: o})
	}
	return o.v
}

// trackName resolves a name inside a recording iteration; read says
// whether the iteration reads it from outside itself.
func (e *evaluator) trackName(name string) memoOperand {
	v, where := e.locate(name)
	r := e.rec
	own := where == inInner || (where == inLoop && (name == r.valVar || r.sets[name]))
	return memoOperand{name: name, read: !own, v: v}
}

// recordAttr evaluates name.attr inside a recording iteration when name
// resolves outside the iteration to a dict holding attr, recording the
// field rather than the dict; ok false: evaluate it the usual way.
func (e *evaluator) recordAttr(name, attr string) (Value, bool) {
	o, ok := e.trackAttr(name, attr)
	if o.read {
		e.rec.m.reads = append(e.rec.m.reads, memoRead{l: o})
	}
	return o.v, ok
}

// trackAttr resolves name.attr inside a recording iteration when name
// resolves outside the iteration to a dict holding attr (ok); read says
// whether the iteration reads the field from outside (it did not set it).
func (e *evaluator) trackAttr(name, attr string) (o memoOperand, ok bool) {
	obj, where := e.locate(name)
	r := e.rec
	if where == inInner || (where == inLoop && (name == r.valVar || r.sets[name])) || !obj.IsDict() {
		return memoOperand{}, false
	}
	v, ok := obj.AsDict().Get(attr)
	if !ok {
		return memoOperand{}, false
	}
	return memoOperand{name: name, attr: attr, read: !r.nsWritten[[2]string{name, attr}], v: v}, true
}

// trackOperand resolves a comparison's operand that is a name or
// name.attr read from outside the recording iteration (ok), unrecorded.
func (e *evaluator) trackOperand(ex expr) (memoOperand, bool) {
	switch n := ex.(type) {
	case *nameExpr:
		o := e.trackName(n.name)
		return o, o.read
	case *attrExpr:
		if nm, isName := n.obj.(*nameExpr); isName {
			o, ok := e.trackAttr(nm.name, n.attr)
			return o, ok && o.read
		}
	}
	return memoOperand{}, false
}

// recordCompare evaluates a comparison inside a recording iteration when
// an operand is a read from outside the iteration, recording the
// comparison and its result rather than the values read; ok false:
// evaluate it the usual way. The operands it reads are plain reads, which
// have no effects, so evaluating the other one alone keeps the order of
// effects.
func (e *evaluator) recordCompare(n *binExpr) (v Value, ok bool, err error) {
	l, lok := e.trackOperand(n.left)
	r, rok := e.trackOperand(n.right)
	switch {
	case !lok && !rok:
		return Undefined(), false, nil
	case !lok:
		l = memoOperand{}
		if l.v, err = e.evalExpr(n.left); err != nil {
			return Undefined(), true, err
		}
	case !rok:
		r = memoOperand{}
		if r.v, err = e.evalExpr(n.right); err != nil {
			return Undefined(), true, err
		}
	}
	res := compare(n.op, l.v, r.v)
	e.rec.m.reads = append(e.rec.m.reads, memoRead{l: l, op: n.op, r: r, res: res})
	return NewBool(res), true, nil
}

// recordSet notes a {% set %} inside a recording iteration; false: the
// iteration cannot be memoized.
func (e *evaluator) recordSet(n *setNode, val Value) bool {
	r := e.rec
	if n.namespace == "" {
		if e.scope == r.child {
			if r.sets == nil {
				r.sets = map[string]bool{}
			}
			r.sets[n.target] = true
		}
		return true
	}
	_, where := e.locate(n.namespace)
	switch {
	case where == inInner:
		return true
	case where == inLoop && r.sets[n.namespace]:
		return true
	case where == inLoop:
		return false
	}
	r.m.nsSets = append(r.m.nsSets, memoNSSet{n.namespace, n.target, val})
	if r.nsWritten == nil {
		r.nsWritten = map[[2]string]bool{}
	}
	r.nsWritten[[2]string{n.namespace, n.target}] = true
	return true
}

// replay writes the memo of iteration i when it still holds (e.scope is
// the loop's scope, the item and loop object set) and reports whether it
// did.
func (e *evaluator) replay(m *iterMemo, item Value) bool {
	if !m.ok || !item.IsDict() || item.AsDict() != m.item {
		return false
	}
	for _, r := range m.reads {
		l, ok := r.l.current(e.scope)
		if !ok {
			return false
		}
		if r.op == "" {
			if !sameValue(l, r.l.v) {
				return false
			}
			continue
		}
		rv, ok := r.r.current(e.scope)
		if !ok || compare(r.op, l, rv) != r.res {
			return false
		}
	}
	for _, s := range m.nsSets {
		if ns, _ := e.scope.get(s.ns); !ns.IsDict() {
			return false
		}
	}
	e.output.WriteString(m.out)
	for _, s := range m.sets {
		e.scope.set(s.name, s.v)
	}
	for _, s := range m.nsSets {
		ns, _ := e.scope.get(s.ns)
		ns.AsDict().Set(s.attr, s.v)
	}
	return true
}

// memoIteration runs one iteration of a memoized loop: replayed from the
// previous render's memo, or run and recorded.
func (e *evaluator) memoIteration(prev, next *loopMemo, n *forNode, i int, item Value, child *scope) error {
	if start := e.output.Len(); prev != nil && i < len(prev.iters) && e.replay(&prev.iters[i], item) {
		m := prev.iters[i]
		m.start, m.end, m.replayed = start, e.output.Len(), true
		next.iters = append(next.iters, m)
		return nil
	}
	r := &iterRec{child: child, valVar: n.valVar} // its maps made at the first set
	r.m.ok = item.IsDict()
	if r.m.ok {
		r.m.item = item.AsDict()
	}
	start := e.output.Len()
	e.rec = r
	err := e.execNodes(n.body)
	e.rec = nil
	if err != nil {
		return err
	}
	r.m.start, r.m.end = start, e.output.Len()
	if len(r.sets) > 0 {
		names := make([]string, 0, len(r.sets))
		for name := range r.sets {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			r.m.sets = append(r.m.sets, memoSet{name, child.vars[name]})
		}
	}
	next.iters = append(next.iters, r.m)
	return nil
}

// loopMemos returns, for a loop about to run, the previous render's memo
// of it and this render's, or nils when it is not memoized this time.
func (e *evaluator) loopMemos(n *forNode) (prev, next *loopMemo) {
	if !n.memo || e.memoNext == nil || e.rec != nil {
		return nil, nil
	}
	if lm := e.memoNext.loops[n]; lm != nil {
		lm.bad = true // a second run in one render: no memo of it
		return nil, nil
	}
	next = &loopMemo{}
	e.memoNext.loops[n] = next
	if e.memoPrev != nil {
		if p := e.memoPrev.loops[n]; p != nil && !p.bad {
			prev = p
		}
	}
	return prev, next
}
