package main

import (
	"bytes"
	"encoding/json"
	"io"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
)

// Output formats of -o (--output). The empty format is the default table
// or text.
const (
	outputJSON = "json"
	outputYAML = "yaml"
	outputWide = "wide"
)

var outputFormats = []string{outputJSON, outputYAML, outputWide}

// outputOpts are a read command's -o and its older --json, which stays
// an alias of -o json.
type outputOpts struct {
	format string
	json   bool
}

// addOutputFlags gives cmd -o/--output and --json; wide says what wide
// adds to the command's default output.
func addOutputFlags(cmd *cobra.Command, o *outputOpts, wide string) {
	cmd.Flags().StringVarP(&o.format, "output", "o", "", "output format: json, yaml or wide ("+wide+")")
	cmd.Flags().BoolVar(&o.json, "json", false, "print JSON (the same as -o json)")
	if err := cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(outputFormats, cobra.ShellCompDirectiveNoFileComp)); err != nil {
		panic(err)
	}
}

// resolve is the format asked for: "" (the default), json, yaml or wide.
func (o outputOpts) resolve() (string, error) {
	switch o.format {
	case "", outputJSON, outputYAML, outputWide:
	default:
		return "", usageError("-o %q: want json, yaml or wide", o.format)
	}
	if o.json {
		if o.format != "" && o.format != outputJSON {
			return "", usageError("--json is -o json: it cannot be combined with -o %s", o.format)
		}
		return outputJSON, nil
	}
	return o.format, nil
}

// printYAML prints v as one YAML document under its JSON field names (the
// API's, as --json prints them), in the same order: v is encoded to JSON,
// which YAML reads as it is, then written back in YAML's block style.
func printYAML(w io.Writer, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return err
	}
	blockStyle(&doc)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	_, err = w.Write(buf.Bytes())
	return err
}

// blockStyle clears the flow style and quotes the JSON text came with; the
// encoder still quotes a string that would read back as another type.
func blockStyle(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		blockStyle(c)
	}
}

// printOutput prints v as JSON or YAML; it says false for any other
// format, which the caller prints itself.
func printOutput(w io.Writer, format string, v any) (bool, error) {
	switch format {
	case outputJSON:
		return true, printJSON(w, v)
	case outputYAML:
		return true, printYAML(w, v)
	}
	return false, nil
}
