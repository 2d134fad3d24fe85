package admission

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

var rewrite = flag.Bool("rewrite", false, "rewrite expected output in testdata scripts")

// The script format (a small cousin of cockroachdb/datadriven): a command
// line, a "----" line, then the expected output up to a blank line. Lines
// starting with '#' between blocks are comments. Commands:
//
//	config [threshold=F] [target=F] [soft=F] [hysteresis=F] [buffer=N]
//	       [forced=D] [interval=D] [weight=F] [decay=D] [placement=worst|bfd|least]
//	       [maxwait=D] [home=BOOL] [rebalance=BOOL]
//	worker add id=N cap=N | worker remove id=N | worker cap id=N cap=N
//	start s=ID [tokens=N] [prefer=N,..] [parent=ID]
//	                            a request of session ID starts (parent: a
//	                            subagent's first turn, StartSubRequest)
//	end s=ID prompt=N completion=N
//	close s=ID                  the session ends
//	share s=ID tokens=N [key=K] its first N tokens are prefix K, shared (SetShared)
//	cancel s=ID                 a held turn is withdrawn
//	tick                        one control-loop round
//	status s=ID | state | next  inspect (next: NextForcedResume)
//
// Every command takes at=D (time since the script's epoch; it never goes
// back). The output is the decisions taken, one per line, or "error: ...".
// After every command the bookkeeping invariants are checked, and after
// every tick the pause postcondition.

type script struct {
	ctl *RawAdmitter
	now time.Time
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newScript() *script {
	c, err := NewRawAdmitter(Config{})
	if err != nil {
		panic(err)
	}
	return &script{ctl: c, now: epoch}
}

// scriptArgs are a command's key=value arguments.
type scriptArgs map[string]string

// num is the integer argument k.
func (args scriptArgs) num(k string) (int64, error) {
	v, ok := args[k]
	if !ok {
		return 0, fmt.Errorf("missing %s=", k)
	}
	return strconv.ParseInt(v, 10, 64)
}

// opt is the integer argument k, 0 when it is missing or malformed.
func (args scriptArgs) opt(k string) int64 {
	v, err := args.num(k)
	if err != nil {
		return 0
	}
	return v
}

// run executes one command line and returns its output.
func (s *script) run(line string) (string, error) {
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return "", fmt.Errorf("empty command")
	}
	cmd := fields[0]
	args := scriptArgs{}
	var pos []string
	for _, f := range fields[1:] {
		if k, v, ok := strings.Cut(f, "="); ok {
			args[k] = v
		} else {
			pos = append(pos, f)
		}
	}
	if err := s.advance(args); err != nil {
		return "", err
	}
	out, opErr, err := s.do(cmd, args, pos)
	if err != nil {
		return "", err
	}
	if err := checkInvariants(s.ctl); err != nil {
		return "", fmt.Errorf("invariant broken after %q: %v", line, err)
	}
	if opErr != nil {
		out = append(out, "error: "+opErr.Error())
	}
	for _, d := range s.ctl.Drain(nil) {
		out = append(out, d.String())
	}
	return strings.Join(out, "\n"), nil
}

// advance moves the script's clock to the command's at= (and takes it out
// of args); time never goes back.
func (s *script) advance(args scriptArgs) error {
	at, ok := args["at"]
	if !ok {
		return nil
	}
	d, err := time.ParseDuration(at)
	if err != nil {
		return fmt.Errorf("bad at: %v", err)
	}
	t := epoch.Add(d)
	if t.Before(s.now) {
		return fmt.Errorf("time goes back: %v", at)
	}
	s.now = t
	delete(args, "at")
	return nil
}

// do runs command cmd: its output lines, the error the admitter answered
// (opErr, part of the output), or a malformed command (err).
func (s *script) do(cmd string, args scriptArgs, pos []string) (out []string, opErr, err error) {
	switch cmd {
	case "config":
		cfg, err := scriptConfig(args)
		if err != nil {
			return nil, nil, err
		}
		c, err := NewRawAdmitter(cfg)
		if err != nil {
			return nil, err, nil
		}
		s.ctl, s.now = c, epoch
	case "worker":
		if err := s.worker(args, pos, &opErr); err != nil {
			return nil, nil, err
		}
	case "start":
		if err := s.start(args, &opErr); err != nil {
			return nil, nil, err
		}
	case "end":
		opErr = s.ctl.EndRequest(s.now, args["s"], args.opt("prompt"), args.opt("completion"))
	case "close":
		opErr = s.ctl.EndSession(s.now, args["s"])
	case "share":
		opErr = s.ctl.SetShared(args["s"], args.opt("tokens"), uint64(args.opt("key")))
	case "cancel":
		opErr = s.ctl.Cancel(s.now, args["s"])
	case "tick":
		s.ctl.Tick(s.now)
		if err := checkAfterTick(s.ctl); err != nil {
			return nil, nil, fmt.Errorf("pause invariant broken: %v", err)
		}
	case "next":
		if t, ok := s.ctl.NextForcedResume(); ok {
			out = append(out, "next forced resume at "+t.Sub(epoch).String())
		} else {
			out = append(out, "no held turn")
		}
	case "status":
		out = append(out, s.ctl.Status(args["s"]).String())
	case "state":
		out = s.state()
	default:
		return nil, nil, fmt.Errorf("unknown command %q", cmd)
	}
	return out, opErr, nil
}

// scriptConfig is the Config a config command's arguments describe.
func scriptConfig(args scriptArgs) (Config, error) {
	var cfg Config
	for k, v := range args {
		var err error
		switch k {
		case "threshold":
			cfg.PauseThreshold, err = strconv.ParseFloat(v, 64)
		case "target":
			cfg.PauseTarget, err = strconv.ParseFloat(v, 64)
		case "soft":
			cfg.SoftDemote, err = strconv.ParseFloat(v, 64)
		case "hysteresis":
			cfg.Hysteresis, err = strconv.ParseFloat(v, 64)
		case "weight":
			cfg.ActingWeight, err = strconv.ParseFloat(v, 64)
		case "buffer":
			cfg.Buffer, err = strconv.ParseInt(v, 10, 64)
		case "forced":
			cfg.ForcedResume, err = time.ParseDuration(v)
		case "interval":
			cfg.Interval, err = time.ParseDuration(v)
		case "decay":
			cfg.DecayHalfLife, err = time.ParseDuration(v)
		case "maxwait":
			cfg.Waits = orNew(cfg.Waits)
			cfg.Waits.MaxWait, err = time.ParseDuration(v)
		case "home":
			cfg.Waits = orNew(cfg.Waits)
			cfg.Waits.HomeFirst, err = strconv.ParseBool(v)
		case "rebalance":
			var on bool
			if on, err = strconv.ParseBool(v); on {
				cfg.Moves = &Moves{}
			}
		case "placement":
			cfg.Placement, err = scriptPlacement(v)
		default:
			err = fmt.Errorf("unknown config key %q", k)
		}
		if err != nil {
			return Config{}, err
		}
	}
	return cfg, nil
}

func scriptPlacement(v string) (Placement, error) {
	switch v {
	case "worst":
		return WorstFit, nil
	case "bfd":
		return BestFitDecreasing, nil
	case "least":
		return LeastLoaded, nil
	}
	return nil, fmt.Errorf("unknown placement %q", v)
}

// worker runs "worker add|remove|cap"; the admitter's answer goes to
// *opErr.
func (s *script) worker(args scriptArgs, pos []string, opErr *error) error {
	if len(pos) != 1 {
		return fmt.Errorf("worker add|remove|cap")
	}
	id, err := args.num("id")
	if err != nil {
		return err
	}
	switch pos[0] {
	case "add":
		*opErr = s.ctl.AddWorker(WorkerID(id), args.opt("cap"))
	case "remove":
		*opErr = s.ctl.RemoveWorker(s.now, WorkerID(id))
	case "cap":
		*opErr = s.ctl.SetCapacity(WorkerID(id), args.opt("cap"))
	default:
		return fmt.Errorf("worker %s?", pos[0])
	}
	return nil
}

// start runs "start": a turn, or a subagent's first turn with parent=;
// the admitter's answer goes to *opErr.
func (s *script) start(args scriptArgs, opErr *error) error {
	var prefer []WorkerID
	if list := args["prefer"]; list != "" {
		for _, f := range strings.Split(list, ",") {
			n, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				return fmt.Errorf("bad prefer %q", list)
			}
			prefer = append(prefer, WorkerID(n))
		}
	}
	if parent := args["parent"]; parent != "" {
		_, *opErr = s.ctl.StartSubRequest(s.now, args["s"], parent, args.opt("tokens"), prefer)
	} else {
		_, *opErr = s.ctl.StartRequestOn(s.now, args["s"], args.opt("tokens"), prefer)
	}
	return nil
}

// state lists the workers and programs ("state").
func (s *script) state() []string {
	var out []string
	for _, w := range s.ctl.Workers(nil) {
		out = append(out, fmt.Sprintf("worker %v cap=%d used=%g u=%.3f marked=%g programs=%d demoted=%v",
			w.ID, w.Capacity, w.Used, w.Util, w.Marked, w.Programs, w.Demoted))
	}
	for _, p := range s.ctl.Programs(s.now, nil) {
		line := fmt.Sprintf("program %s %v/%v %v tokens=%d steps=%d inflight=%d", p.ID, p.Phase, p.Lifecycle, p.Status, p.Tokens, p.Steps, p.Inflight)
		if p.HasWorker {
			line += " w=" + p.Worker.String()
		}
		if p.Marked {
			line += " marked"
		}
		if p.Acting > 0 {
			line += " acting=" + p.Acting.String()
		}
		out = append(out, line)
	}
	return out
}

type block struct {
	pre      []string // comments and blank lines before the command
	cmd      string
	expected []string
	line     int
}

func parseScript(text string) ([]block, error) {
	lines := strings.Split(text, "\n")
	var blocks []block
	var pre []string
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			pre = append(pre, l)
			continue
		}
		b := block{pre: pre, cmd: l, line: i + 1}
		pre = nil
		i++
		if i >= len(lines) || lines[i] != "----" {
			return nil, fmt.Errorf("line %d: expected ---- after %q", i+1, l)
		}
		for i++; i < len(lines) && lines[i] != ""; i++ {
			b.expected = append(b.expected, lines[i])
		}
		blocks = append(blocks, b)
		if i < len(lines) {
			pre = append(pre, "")
		}
	}
	// trailing comments are dropped by rewrite only if after the last block
	return blocks, nil
}

func formatScript(blocks []block) string {
	var sb strings.Builder
	for _, b := range blocks {
		for _, p := range b.pre {
			sb.WriteString(p + "\n")
		}
		sb.WriteString(b.cmd + "\n----\n")
		for _, e := range b.expected {
			sb.WriteString(e + "\n")
		}
	}
	return sb.String()
}

func TestScripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	sort.Strings(files)
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			blocks, err := parseScript(string(raw))
			if err != nil {
				t.Fatal(err)
			}
			s := newScript()
			for i := range blocks {
				b := &blocks[i]
				got, err := s.run(b.cmd)
				if err != nil {
					t.Fatalf("%s:%d: %s: %v", f, b.line, b.cmd, err)
				}
				var gotLines []string
				if got != "" {
					gotLines = strings.Split(got, "\n")
				}
				if *rewrite {
					b.expected = gotLines
					continue
				}
				if strings.Join(gotLines, "\n") != strings.Join(b.expected, "\n") {
					t.Errorf("%s:%d: %s\nwant:\n%s\ngot:\n%s", f, b.line, b.cmd,
						strings.Join(b.expected, "\n"), got)
				}
			}
			if *rewrite {
				if err := os.WriteFile(f, []byte(formatScript(blocks)), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// orNew is p, or a new zero T when p is nil.
func orNew[T any](p *T) *T {
	if p == nil {
		return new(T)
	}
	return p
}
