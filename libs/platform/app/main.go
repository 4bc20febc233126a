package app

import (
	"fmt"
	"io"
	"os"

	"go.uber.org/fx"
)

// Commands are a service binary's one-shot subcommands by name (e.g. `config-api bootstrap-token`),
// each given the arguments after its name.
type Commands map[string]func(args []string) error

// Main is a service binary's main: when the first argument names one of commands it runs that command
// instead (an error is printed on stderr as "<service> <command>: <error>" and the process exits 1);
// otherwise it runs the fx app Module(service, modules...) until it is signalled to stop.
func Main(service string, commands Commands, modules ...fx.Option) {
	if ran, code := runCommand(service, os.Args[1:], commands, os.Stderr); ran {
		if code != 0 {
			os.Exit(code)
		}
		return
	}
	fx.New(Module(service, modules...)).Run()
}

// runCommand runs the command args name, if any, reporting its error on stderr; ran says whether
// args named one, code is the process's exit code.
func runCommand(service string, args []string, commands Commands, stderr io.Writer) (ran bool, code int) {
	if len(args) == 0 {
		return false, 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		return false, 0
	}
	if err := cmd(args[1:]); err != nil {
		fmt.Fprintln(stderr, service+" "+args[0]+":", err)
		return true, 1
	}
	return true, 0
}
