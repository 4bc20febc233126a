package metrics

// ScrapeTimeout bounds what one collector asks during a scrape (tests check a scrape stays within it).
const ScrapeTimeout = scrapeTimeout
