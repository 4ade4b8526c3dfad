"""Stand-ins for real provider APIs: the routes a test gives a mock, and the mocks' built-in
surfaces (docs/mock-providers.md, "Stand-ins for real APIs")."""
