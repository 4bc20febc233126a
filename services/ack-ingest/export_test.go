package ackingest

// NewWithMetrics is New reporting to m, so the tests of package ackingest_test can scrape what the
// service exports (the fx Module passes the app's registry the same way).
var NewWithMetrics = newService
