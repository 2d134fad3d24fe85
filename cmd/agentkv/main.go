// Command agentkv is the command-line face of the agentkv library: simulate
// agentic workloads against simulated engines, replay and convert traces, and
// debug block hashing. Run "agentkv help" for the list of subcommands.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// command is one subcommand. Each lives in its own file and registers itself
// from init, so adding one never touches this file.
type command struct {
	name    string
	summary string // one line for the command list
	usage   string // the synopsis after "agentkv NAME"
	help    string // paragraphs explaining the command, shown by --help
	run     func(env *cmdEnv, args []string) error
}

// cmdEnv is what a command may touch, so tests can run commands in-process.
type cmdEnv struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

var commands = map[string]*command{}

func register(c *command) {
	if _, dup := commands[c.name]; dup {
		panic("agentkv: duplicate command " + c.name)
	}
	commands[c.name] = c
}

// usageError is a bad invocation: the message is printed on one line and
// the process exits with status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// newFlags returns a FlagSet for c that prints c's help on -h/--help and
// reports errors as usage errors rather than exiting.
func newFlags(env *cmdEnv, c *command) *flag.FlagSet {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseFlags parses args with fs, printing the command's help for -h.
func parseFlags(env *cmdEnv, c *command, fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		printCommandHelp(env.stdout, c, fs)
		return errHelpShown
	}
	if err != nil {
		return usagef("%s: %v", c.name, err)
	}
	return nil
}

var errHelpShown = errors.New("help shown")

func printCommandHelp(w io.Writer, c *command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: agentkv %s %s\n\n%s\n", c.name, c.usage, strings.TrimSpace(c.help))
	if fs == nil {
		return
	}
	var b strings.Builder
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	if b.Len() > 0 {
		fmt.Fprintf(w, "\nflags:\n%s", b.String())
	}
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "agentkv: session-aware KV routing primitives for agentic LLM inference")
	fmt.Fprintln(w, "\nusage: agentkv COMMAND [flags] [args]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun \"agentkv COMMAND --help\" for a command's flags and details.")
}

// run executes the command line and returns the process exit status.
func run(env *cmdEnv, args []string) int {
	if len(args) == 0 {
		printUsage(env.stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			if c, ok := commands[args[1]]; ok {
				printCommandHelp(env.stdout, c, nil)
				return 0
			}
		}
		printUsage(env.stdout)
		return 0
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(env.stderr, "agentkv: unknown command %q (run \"agentkv help\")\n", name)
		return 2
	}
	err := c.run(env, args[1:])
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, errHelpShown):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(env.stderr, "agentkv %s\n", ue.msg)
		return 2
	default:
		fmt.Fprintf(env.stderr, "agentkv %s: %v\n", name, err)
		return 1
	}
}

func main() {
	os.Exit(run(&cmdEnv{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr}, os.Args[1:]))
}
