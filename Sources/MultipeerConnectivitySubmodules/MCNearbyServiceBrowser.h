// Empty: `import MultipeerConnectivity.MCNearbyServiceBrowser` brings the Swift module MultipeerConnectivity, which declares it.
