package ui

// CheckBound is checkBound, for the tests of package ui_test.
var CheckBound = checkBound
