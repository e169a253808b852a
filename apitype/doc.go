// Package apitype holds the wire types of leasekeeper's local API: the JSON
// bodies of every route the agent serves on its Unix socket, the error body
// and its codes, and the frames of the watch stream.
//
// It depends on the standard library and package board only, so the worker
// client (package client), which links it, stays small: a worker that links
// the client links nothing but the standard library, apitype and board
// (client.TestImportsStdlibOnly). The route reference lives in the package
// documentation of socketapi.
package apitype
