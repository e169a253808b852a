package main

import (
	"github.com/spf13/cobra"
)

// completionShells are the shells `leasekeeper completion` writes scripts
// for. Cobra generates them from the command tree, so they never fall out of
// step with the commands and flags; the scripts ask the binary itself (the
// hidden __complete command cobra adds) for the candidates.
var completionShells = []string{"bash", "zsh", "fish"}

func newCompletionCmd(env *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "completion bash|zsh|fish",
		Short: "Print a shell completion script",
		Long: `Print a completion script for bash, zsh or fish on stdout.

  bash  (needs the bash-completion package)
        leasekeeper completion bash > /etc/bash_completion.d/leasekeeper
        or, for one user:
        leasekeeper completion bash > ~/.local/share/bash-completion/completions/leasekeeper
  zsh   leasekeeper completion zsh > "${fpath[1]}/_leasekeeper"
        (compinit must be enabled: autoload -U compinit; compinit)
  fish  leasekeeper completion fish > ~/.config/fish/completions/leasekeeper.fish

Start a new shell afterwards.`,
		ValidArgs: completionShells,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError("want one shell (bash, zsh or fish), got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			root := cmd.Root()
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(env.stdout, true)
			case "zsh":
				return root.GenZshCompletion(env.stdout)
			case "fish":
				return root.GenFishCompletion(env.stdout, true)
			}
			return usageError("unknown shell %q: want bash, zsh or fish", args[0])
		},
	}
}
