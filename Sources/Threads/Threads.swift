// The Threads module arrives with its issue.
